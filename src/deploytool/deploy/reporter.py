"""How a deploy tells a person what it is doing. The executor, the health gate, the hooks,
rollout and watch all report through one Reporter; the CLI's draws progress bars."""

from __future__ import annotations


class Reporter:
    """How deploy tells a person what it is doing; the CLI's version draws progress bars.
    The default is silent, for library callers and tests."""

    def step(self, message: str) -> None:  # a milestone: "stopping release 1"
        pass

    def waiting(self, label: str, elapsed: float, budget: float) -> None:  # a long wait
        pass

    def warn(self, message: str) -> None:
        pass

    def note(self, message: str) -> None:  # worth knowing, not a problem: "GPU3 is not used: ..."
        pass
