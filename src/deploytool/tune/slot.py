"""Candidates as releases of a Docker slot (`tune --gpu UUID` or `--cpu-slot NAME`), through the same plan and
executor as `up`: each candidate's launch is planned by `plan_candidate` (the facts, checks, memory
gate and compose document of `up`'s release) and run by `execute`, without the cut-over, the
pruning or qualify: a candidate never becomes the slot's current release.

The slot's lock is held for the whole search. A release that served on the slot when the search
began is stopped once, before the first candidate starts (a slot serves one container), and is
brought back (started again and verified healthy, as a rollback does) when the search ends: at
the end, on a failure, and on Ctrl-C. The candidates' containers are removed then; their logs
are kept in the report folder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..deploy.candidate_plan import (
    CANDIDATE_BIND,
    plan_candidate,
    plan_candidate_stop,
    plan_pause_serving,
    plan_search_end,
)
from ..deploy.executor import execute
from ..deploy.facts import gather_facts, gather_slot
from ..errors import DeploytoolError, Interrupted
from ..files import write_atomic
from ..host.engine import Engine
from ..host.releases import Release
from ..host.slots import Slot
from ..profiles import Profile
from ..release.state import slot_lock
from .local import free_port


@dataclass
class SlotSession:
    slot: Slot
    engine: Engine
    profiles_dirs: list[Path] | None = None
    serving: Release | None = None  # the release that served when the search began
    made: list[int] = field(default_factory=list)  # the candidates' release numbers
    restored: str | None = None  # what the end of the search did about the serving release

    def stop_serving_once(self) -> None:
        if self.serving is not None:
            return
        facts = gather_slot(self.engine, self.slot)
        plan = plan_pause_serving(facts)
        if plan is None:
            return
        self.serving = facts.serving
        execute(plan, slot=self.slot, engine=self.engine)

    def finish(self) -> None:
        """Remove the candidates' containers; bring the serving release back."""
        plan = plan_search_end(gather_slot(self.engine, self.slot), self.made, self.serving)
        execute(plan, slot=self.slot, engine=self.engine)
        if self.serving is not None:
            self.restored = f"release {self.serving.release} serves again"


@contextlib.contextmanager
def slot_session(slot: Slot, profiles_dirs: list[Path] | None = None) -> Iterator[SlotSession]:
    engine = Engine()
    with slot_lock(slot.name, "tune"):
        session = SlotSession(slot, engine, profiles_dirs)
        try:
            yield session
        finally:
            session.finish()


class SlotServer:
    """One candidate as a release of the slot (the tune.search.Server protocol)."""

    def __init__(self, session: SlotSession, profile: Profile, log_path: Path) -> None:
        self.session, self.profile, self.log_path = session, profile, log_path
        self.url = ""
        self.release: int | None = None
        self.error: str | None = None

    def start(self) -> None:
        s = self.session
        s.stop_serving_once()
        port = free_port()
        facts = gather_facts(
            s.engine, s.slot, self.profile, host_port=port, bind=CANDIDATE_BIND, wheelhouse=None
        )
        plan = plan_candidate(facts, self.profile, host_port=port)
        self.release, self.url = plan.release, plan.url or ""
        if plan.release is not None:
            s.made.append(plan.release)
        try:
            execute(plan, slot=s.slot, engine=s.engine)
        except Interrupted:
            raise KeyboardInterrupt from None
        except DeploytoolError as exc:
            self.error = exc.message.splitlines()[0]

    def served_profile(self) -> Profile:
        return self.profile  # in its container it listens on the profile's own port

    def wait_ready(self, timeout_s: float) -> str | None:
        return self.error  # the plan's WaitHealthy waited within the profile's health budget

    def log_tail(self, lines: int = 3) -> str:
        text = self._logs().strip().splitlines()
        return " | ".join(text[-lines:]) or "(empty log)"

    def stop(self) -> None:
        if self.release is None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.log_path, self._logs())  # scrubbed: the container's log may print its key
        execute(
            plan_candidate_stop(self.session.slot, self.release),
            slot=self.session.slot,
            engine=self.session.engine,
        )

    def _logs(self) -> str:
        if self.release is None:
            return ""
        release = self.session.engine.release(self.session.slot.name, self.release)
        if release is None:
            return ""
        try:
            return self.session.engine.logs_tail(release, lines=5000)
        except Exception as exc:  # a log is evidence, never a reason to fail the search
            return f"(logs unreadable: {type(exc).__name__})"
