"""The health gate: a release is healthy when the engine's health check passed AND its
published port answers the health path from the host."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from ..errors import DeployError
from ..host.engine import Engine
from ..host.releases import Release
from ..host.slots import slot_named
from ..release.state import journal
from ..server.readiness import health_check
from .reporter import Reporter


class HealthFailure(DeployError):
    pass


def wait_until_healthy(
    engine: Engine,
    release: Release,
    *,
    budget: float,
    path: str,
    reporter: Reporter,
    headers: dict[str, str] | None = None,
    rule: str = "",
) -> Release:
    """A crash or a restart loop fails at once, not at the budget. (The engine resets
    RestartCount when deploytool starts a container, so a restored release is not mistaken
    for a crashing one.) The budget counts from when the container started, as the engine's
    health check counts its start_period, so the two give up together (HealthSpec.budget_seconds)."""
    started = time.monotonic() - _since_start(release)
    while True:
        elapsed = time.monotonic() - started
        release = engine.refresh(release)
        if release.state in ("exited", "dead", "restarting") or release.restart_count > 0:
            code = engine.exit_code(release)
            raise HealthFailure(
                f"release {release.release} crashed while starting (state {release.state}, "
                f"exit code {code}); last lines of its log:\n{_indent(engine.logs_tail(release))}\n{_whole_log(release)}"
            )
        if release.health == "healthy" and _answers(release.url, path, headers, budget - elapsed):
            journal("release.healthy", slot=release.slot, release=release.release, seconds=round(elapsed, 1))
            return release
        if release.health == "unhealthy":
            raise HealthFailure(
                _not_healthy(
                    release,
                    "failed its health check within its health budget",
                    time.monotonic() - started,
                    budget,
                    rule,
                    engine,
                )
            )
        elapsed = time.monotonic() - started  # a probe may have taken its time
        if elapsed > budget:
            raise HealthFailure(
                _not_healthy(
                    release, "did not become healthy within its health budget", elapsed, budget, rule, engine
                )
            )
        reporter.waiting(f"waiting for release {release.release} to be healthy", elapsed, budget)
        time.sleep(POLL_S)


# Between two reads of the engine's health: the release takes traffic this much later at most
# after the engine marks it healthy. A read is one inspect of the container, so a fifth of a
# second costs the engine little, where half a second added a quarter second to every start.
POLL_S = 0.2


# How far back a container's start may be taken from the engine's clock: a restart or a start just
# made is seconds old; more means a clock that disagrees with this one, and the wait counts from now.
MAX_START_LEAD_S = 60.0


def _since_start(release: Release) -> float:
    """Seconds since the engine started the container (0 when it does not say)."""
    try:
        started = datetime.fromisoformat(release.started.replace("Z", "+00:00"))
        age = (datetime.now(UTC) - started).total_seconds()
    except (ValueError, TypeError):
        return 0.0
    return age if 0 <= age <= MAX_START_LEAD_S else 0.0


def _not_healthy(release: Release, what: str, waited: float, budget: float, rule: str, engine: Engine) -> str:
    """How long it was waited, the budget and the profile field that gives a slow start more time."""
    how = f" = {rule}" if rule else ""
    return (
        f"release {release.release} {what} of {budget:g} s{how}: waited {waited:.1f} s since its container "
        f"started. A server still loading its weights needs more: raise health.start_period in profile "
        f"{release.profile}; last lines of its log:\n{_indent(engine.logs_tail(release))}\n{_whole_log(release)}"
    )


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
