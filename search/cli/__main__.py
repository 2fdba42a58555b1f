"""`python -m search.cli`: the same as the `crucible` command."""

from search.cli.main import main

main()
