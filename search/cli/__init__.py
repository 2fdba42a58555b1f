"""The `crucible` command line: a thin client of the run service."""

from search.cli.main import main

__all__ = ["main"]
