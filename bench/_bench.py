"""What every bench shares: `--quick` (tiny inputs, the same code path) and `--record` (its figures as
docs/results/<name>.json, stamped by docs/record.py), and where the shared data lives beside a checkout.

Not a bench itself: tests/bench runs every bench/*.py but the ones whose name starts with an underscore.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
"""The traces shipped beside a checkout (../shared/data), absent on a user's machine."""
SHIPPED_KV = ROOT / "targets" / "kv" / "workloads"


def _record_module() -> Any:
    """docs/record.py, loaded by path: the docs own the results format, and bench/ is a folder of scripts."""
    spec = importlib.util.spec_from_file_location("record", ROOT / "docs" / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("record", module)
    spec.loader.exec_module(module)
    return module


record = _record_module()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every bench takes."""
    parser.add_argument(
        "--quick", action="store_true", help="tiny inputs (seconds): what the default test run executes"
    )
    parser.add_argument(
        "--record",
        nargs="?",
        const=record.RESULTS,
        type=Path,
        metavar="DIR",
        help="write the figures to DIR/<bench>.json (default DIR: docs/results)",
    )


class Session:
    """One run of a bench: stamped when it starts, its figures written at the end when `--record` asks."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.name = Path(sys.argv[0]).stem
        self.quick = bool(args.quick)
        self.folder: Path | None = args.record
        self.stamp = record.Stamp(["python", f"bench/{self.name}.py", *sys.argv[1:]])

    def save(self, data: dict[str, Any]) -> None:
        """Record `data` (tables as lists of flat rows, facts as scalars) when asked; say where."""
        if self.folder is not None:
            print(f"recorded {self.stamp.write(self.name, data, self.folder)}")


def start(
    parser: argparse.ArgumentParser, argv: list[str] | None = None
) -> tuple[argparse.Namespace, Session]:
    """Parse the bench's flags (with --quick and --record) and start its session."""
    add_arguments(parser)
    args = parser.parse_args(argv)
    return args, Session(args)


def data_file(path: Path, quick: bool, fallback: Path | str) -> str:
    """`path` when it exists; in quick mode the shipped `fallback`; else exit in one line naming it."""
    if path.exists():
        return str(path)
    if quick:
        return str(fallback)
    sys.exit(f"bench: {path} is missing (the shared data beside the checkout); pass a trace, or --quick")


def crucible(session: Session, argv: Sequence[str]) -> None:
    """Run `crucible ARGV` in this process: its tables as usual, or with `--record` its `--json` data
    printed and recorded (the same work either way); its exit status is kept. What the command stores
    goes to a store of its own that is dropped after: a bench never writes the user's."""
    from search.cli import main

    with tempfile.TemporaryDirectory() as folder:
        argv = [*argv, "--db", f"sqlite:///{Path(folder) / 'bench.db'}"]
        if session.folder is None:
            main(argv)
            return
        out, status = io.StringIO(), 0
        with contextlib.redirect_stdout(out):
            try:
                main([*argv, "--json"])
            except SystemExit as exc:  # a failed check still has figures worth keeping
                status = exc.code if isinstance(exc.code, int) else 1
    data = json.loads(out.getvalue())
    print(json.dumps(data, indent=2))
    session.save(data)
    if status:
        sys.exit(status)
