"""Results that regenerate: one JSON file per figure set, stamped with the command, commit, date and machine.

Benches write these files with `--record`; any `crucible ... --json` command is recorded with
`python docs/record.py NAME -- crucible ...` (run from the repository root). The site's results hook
(docs/results_hook.py) renders the pages from the files, so a figure and its command cannot disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
LOADED_PER_CORE = 0.25
"""A run is `loaded` when, at its start, the 1-minute load average exceeds this share of the cores: other
work then competes for the CPU and every timing on that machine is slower than on an idle one."""
KEYS = ("command", "commit", "date", "machine", "loaded", "data")


def machine() -> dict[str, Any]:
    """The machine as it is now: cores, memory and the load average (1, 5, 15 min) before the work."""
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(pages * page_size / 2**30, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def commit(root: Path = ROOT, results: Path = RESULTS) -> str:
    """The checkout's commit, with `+dirty` when tracked files other than the results differ from it (the
    figure is not that commit's alone); results recorded one after another do not dirty each other."""
    head = _git(root, "rev-parse", "--short", "HEAD")
    changed = _git(
        root, "status", "--porcelain", "--untracked-files=no", "--", ".", f":!{results.relative_to(root)}"
    )
    return head + ("+dirty" if changed else "")


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


class Stamp:
    """Taken when the work starts (the load average must not include the work itself), written at its end."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = shlex.join(command)
        self.commit = commit()
        self.date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        self.machine = machine()
        cores = self.machine["cores"] or 1
        self.loaded = self.machine["load_average"][0] > LOADED_PER_CORE * cores

    def write(self, name: str, data: Any, folder: Path = RESULTS) -> Path:
        """docs/results/<name>.json (or in `folder`) holding the stamp and `data`."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.json"
        record = dict(
            zip(KEYS, (self.command, self.commit, self.date, self.machine, self.loaded, data), strict=True)
        )
        path.write_text(json.dumps(record, indent=2) + "\n")
        return path


def read(path: Path) -> dict[str, Any]:
    """A results file, checked to hold every key of the format; ValueError names what is missing."""
    record = json.loads(path.read_text())
    missing = [k for k in KEYS if k not in record]
    if missing:
        raise ValueError(f"{path}: not a results file (missing {', '.join(missing)})")
    return record


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Run a `crucible ... --json` command and record its output as docs/results/NAME.json.",
        usage="python docs/record.py NAME [--to DIR] -- crucible COMMAND ... --json",
    )
    parser.add_argument("name", help="the results file's name (docs/results/NAME.json)")
    parser.add_argument("--to", type=Path, default=RESULTS, help="folder to write to (default: docs/results)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if command[:1] != ["crucible"] or "--json" not in command:
        parser.error("record a `crucible ... --json` command, after --")
    stamp = Stamp(command)
    beside = Path(sys.executable).with_name("crucible")  # this environment's, where run with its python
    crucible = str(beside) if beside.exists() else shutil.which("crucible") or "crucible"
    done = subprocess.run([crucible, *command[1:]], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"record: `{stamp.command}` exited {done.returncode}; nothing recorded")
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        sys.exit(f"record: `{stamp.command}` printed no JSON ({exc}); nothing recorded")
    print(f"recorded {stamp.write(args.name, data, args.to)}")


if __name__ == "__main__":
    main()
