"""deploy's Reporter on a terminal: what `up`, `rollback`, `rollout` and the slot commands tell a
person while they run, milestones as lines and long waits as one progress bar, on stderr."""

from typing import Any

from ..deploy.reporter import Reporter
from .app import console_err


class ConsoleReporter(Reporter):
    """deploy.Reporter for a terminal: milestones as lines, long waits as one progress bar, on stderr."""

    def __init__(self) -> None:
        self._progress: Any = None  # a rich Progress while a long wait is drawn
        self._task = None

    def step(self, message: str) -> None:
        self._close()
        console_err.print("[cyan]•[/] ", end="")  # a message quotes servers and logs: never markup
        console_err.print(message, markup=False, highlight=False)

    def warn(self, message: str) -> None:
        self._close()
        console_err.print("[yellow]warning:[/] ", end="")
        console_err.print(message, markup=False, highlight=False)

    def note(self, message: str) -> None:
        self._close()
        console_err.print(f"note: {message}", markup=False, highlight=False)

    def waiting(self, label: str, elapsed: float, budget: float) -> None:
        if self._progress is None:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TimeElapsedColumn(),
                TextColumn("budget {task.total:.0f} s"),
                console=console_err.rich,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(label, total=budget)
        self._progress.update(self._task, completed=min(elapsed, budget), description=label)

    def _close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> "ConsoleReporter":
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()
