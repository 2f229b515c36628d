"""Errors a user can act on: what was expected, where, and what to do next.

Every error deploytool raises on purpose is a DeploytoolError; the CLI prints its message and
hint and exits with its code, never a traceback.
"""

from __future__ import annotations

# Exit codes shared by every command (documented in docs/cli.md).
EXIT_OK = 0
EXIT_FAILED = 1  # the thing ran and said no: a gate failed, a release never became healthy
EXIT_USAGE = 2  # bad input: unknown profile, malformed YAML, bad flag value
EXIT_ENGINE = 3  # no Docker engine / compose plugin reachable
EXIT_NO_GPU = 4  # no NVIDIA driver / NVML on this machine
EXIT_BUSY = 5  # another deploytool holds the slot's lock
EXIT_COULD_NOT_RUN = (
    6  # the command could not do its work: endpoint unreachable, nothing measured, a tool failed
)
EXIT_INCONCLUSIVE = 7  # tune: the budget ran out before the search could decide (nothing recommended)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells expect
EXIT_TERMINATED = 143  # SIGTERM (128 + 15): a batch scheduler's time limit, `kill`, systemd's stop


class DeploytoolError(Exception):
    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, hint: str | None = None, details: object = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details  # what the command got done before it failed; --json prints it as "result"

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(DeploytoolError):
    exit_code = EXIT_USAGE


class FieldError(UsageError):
    """A request's field holds a value the library cannot use. `field` is the request's own name
    for it (`retention`, `qualify_limit`): the library knows its requests, not the flags that fill
    them, so a library caller reads the field and the CLI says the flag that set it instead
    (cli/flags.py). `value`, already worded by the raiser (`repr` for text), is shown after the
    name: "retention 0: keep at least 1 stopped release"."""

    def __init__(
        self,
        field: str,
        problem: str,
        *,
        value: str | None = None,
        hint: str | None = None,
        details: object = None,
    ):
        self.field = field
        self.problem = problem
        self.value = value
        super().__init__(self.worded(field), hint=hint, details=details)

    def worded(self, name: str) -> str:
        """The message with `name` (the field, or the flag that set it) in front."""
        return f"{name if self.value is None else f'{name} {self.value}'}: {self.problem}"


class ProfileError(UsageError):
    """A profile file that cannot be used: the file, the field and what was expected."""


class EngineUnavailable(DeploytoolError):
    exit_code = EXIT_ENGINE

    def __init__(self, message: str, *, hint: str | None = None, reason: str | None = None):
        super().__init__(message, hint=hint)
        self.reason = reason or message  # why, without the sentence around it (for a note that says its own)


class NoGpuError(DeploytoolError):
    exit_code = EXIT_NO_GPU


class SlotBusy(DeploytoolError):
    exit_code = EXIT_BUSY


class CouldNotRun(DeploytoolError):
    """The input was fine but the work could not be done (not a "no" from a gate)."""

    exit_code = EXIT_COULD_NOT_RUN


class Interrupted(DeploytoolError):
    """Ctrl-C: the message says what was running and what serves now."""

    exit_code = EXIT_INTERRUPTED


class BuildError(DeploytoolError):
    pass


class DeployError(DeploytoolError):
    pass


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be: every path that cleans up after Ctrl-C (a tune
    candidate's server, an up's half-started release, a rollout's journal) cleans up after a
    batch scheduler's time limit or a `kill` too, instead of dying with its servers left running."""


class FieldSentenceError(FieldError):
    """A FieldError whose problem reads on from the value as one sentence, with no colon between:
    "--out DIR is not empty", "--image 'x' is not pinned by digest (...)". Which to raise is the
    wording's choice; the field, the table of flags and the exit code are FieldError's."""

    def worded(self, name: str) -> str:
        return f"{name if self.value is None else f'{name} {self.value}'} {self.problem}"
