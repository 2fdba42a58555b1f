"""A run's progress on stderr: a bar of candidates done, the time, and the best candidate found so far.

Where stderr is not a terminal (a log file, a CI job) a bar cannot redraw, so a plain line says the same at
most every LINE_EVERY_S seconds."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from search.loop.search import Reporter

LINE_EVERY_S = 30.0


class Bar(Reporter):
    """What the loop reports, drawn as one bar; its notes printed above it, whole."""

    def __init__(self, console: Console | None = None) -> None:
        self.run_id = ""
        self.started_at = self.last_line = time.monotonic()
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("best found {task.fields[best]}"),
            console=console or Console(stderr=True),
            transient=False,
        )
        self.task: Any = None

    def started(self, run_id: str, done: int, budget: int) -> None:
        self.run_id = run_id
        self.started_at = self.last_line = time.monotonic()
        self.progress.start()
        self.task = self.progress.add_task(f"run {run_id}", total=budget, completed=done, best="-")

    def candidate(self, done: int, budget: int, best: float | None, status: str) -> None:
        shown = "-" if best is None else f"{best:.4f}"
        self.progress.update(self.task, completed=done, best=shown)
        now = time.monotonic()
        if not self.progress.console.is_terminal and now - self.last_line >= LINE_EVERY_S:
            self.last_line = now
            minutes, seconds = divmod(int(now - self.started_at), 60)
            line = f"run {self.run_id}: {done}/{budget} done, {minutes}:{seconds:02d}, best found {shown}"
            self.progress.console.print(line, markup=False, highlight=False)

    def note(self, message: str) -> None:
        self.progress.console.print(message, markup=False, highlight=False)

    def stop(self) -> None:
        self.progress.stop()
