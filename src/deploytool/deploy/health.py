"""The health gate: a release is healthy when the engine's health check passed AND its
published port answers the health path from the host."""

from __future__ import annotations

import time

from ..host.engine import Engine
from ..host.releases import Release
from ..errors import DeployError
from ..release.slots import slot_named
from ..release.state import journal
from ..server.readiness import health_check
from .reporter import Reporter


class HealthFailure(DeployError):
    pass


def wait_until_healthy(engine: Engine, release: Release, *, budget: float, path: str,
                       reporter: Reporter, headers: dict[str, str] | None = None) -> Release:
    """A crash or a restart loop fails at once, not at the budget. (The engine resets
    RestartCount when deploytool starts a container, so a restored release is not mistaken
    for a crashing one.)"""
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        release = engine.refresh(release)
        if release.state in ("exited", "dead", "restarting") or release.restart_count > 0:
            code = engine.exit_code(release)
            raise HealthFailure(f"release {release.release} crashed while starting (state {release.state}, "
                                f"exit code {code}); last lines of its log:\n{_indent(engine.logs_tail(release))}\n{_whole_log(release)}")
        if release.health == "healthy" and _answers(release.url, path, headers, budget - elapsed):
            journal("release.healthy", slot=release.slot, release=release.release, seconds=round(elapsed, 1))
            return release
        if release.health == "unhealthy":
            raise HealthFailure(f"release {release.release} failed its health check; last lines of its log:\n"
                                f"{_indent(engine.logs_tail(release))}\n{_whole_log(release)}")
        elapsed = time.monotonic() - started  # a probe may have taken its time
        if elapsed > budget:
            raise HealthFailure(f"release {release.release} did not become healthy within its health budget "
                                f"of {budget:g} s (profile health: start_period + retries x (interval + timeout)); "
                                f"last lines of its log:\n{_indent(engine.logs_tail(release))}\n{_whole_log(release)}")
        reporter.waiting(f"waiting for release {release.release} to be healthy", elapsed, budget)
        time.sleep(0.5)


# One health GET from the host, connect to last byte, and never past the wait's budget: a server
# that trickles its answer fails the probe at its deadline, and the wait at its budget.
PROBE_TIMEOUT_S = 5.0


def _answers(url: str, path: str, headers: dict[str, str] | None, left_s: float) -> bool:
    timeout = max(0.5, min(PROBE_TIMEOUT_S, left_s))
    return health_check(url, path, timeout=timeout, headers=headers).ok


def _whole_log(release: Release) -> str:
    """The command that shows the whole log (the release is kept for inspection)."""
    slot = slot_named(release.slot, release.gpus)
    return f"  the whole log: deploytool logs {slot.option} --release {release.release}"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines()[-30:])
