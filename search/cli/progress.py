"""A run's progress on stderr: a bar of candidates done, the time, and the best candidate found so far."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from search.loop.search import Reporter


class Bar(Reporter):
    """What the loop reports, drawn as one bar; its notes printed above it, whole."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("best found {task.fields[best]}"),
            console=Console(stderr=True),
            transient=False,
        )
        self.task: Any = None

    def started(self, run_id: str, done: int, budget: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task(f"run {run_id}", total=budget, completed=done, best="-")

    def candidate(self, done: int, budget: int, best: float | None, status: str) -> None:
        self.progress.update(self.task, completed=done, best="-" if best is None else f"{best:.4f}")

    def note(self, message: str) -> None:
        self.progress.console.print(message, markup=False, highlight=False)

    def stop(self) -> None:
        self.progress.stop()
