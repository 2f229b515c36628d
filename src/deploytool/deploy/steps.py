"""A deploy as data: the typed steps a plan is made of, and the plan itself.

plan.py decides (pure functions of facts, profile and options); executor.py applies a plan
step by step through the engine. `up --dry-run` prints a plan and stops there, so every
field here is what a person reads before anything happens: what is built, stopped, wiped,
started, waited for, qualified, cut over and pruned, and what a failure would restore. The
plan also carries what its steps need of the profile (fields whose metadata is CARRIED: the
profile a build and the suites read, where each secret is read from), so the executor takes
nothing beside it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..profiles import Profile
    from ..release.secrets import ReleaseSecret


# The metadata of a field the executor reads when it applies a step (what the step needs of the
# profile: the profile a build derives the image from, where a secret's value is read), made by
# the planner with the rest of the step. It is context, not a decision: neither `--json` nor the
# plan's lines show it, and it holds no secret value, only where one is read. Such a field is
# declared `field(default=..., repr=False, compare=False, metadata=CARRIED)`, written out where
# it is declared so that dataclass checkers (ruff's RUF009 among them) see a field there.
CARRIED: Mapping[str, Any] = MappingProxyType({"carried": True})


def shown(item: Any, leave: tuple[str, ...] = ()) -> dict[str, Any]:
    """A step's or a plan's fields as `--json` shows them: all but the carried ones (and `leave`)."""
    return {
        f.name: copy.deepcopy(getattr(item, f.name))
        for f in fields(item)
        if not f.metadata.get("carried") and f.name not in leave
    }


@dataclass(frozen=True)
class Build:
    profile: str
    image: str
    needed: bool  # False: an image with the same inputs is on the engine
    reason: str
    # `build --wheelhouse DIR`'s folder: its wheels are inputs of the tag, so the image a build
    # made from it is found (and built again) only with the same folder
    wheelhouse: str | None = None
    # the profile the build derives the image from again, so that a profile or recipe file
    # changed since planning gives another tag and is refused rather than built
    spec: Profile | None = field(default=None, repr=False, compare=False, metadata=CARRIED)

    def describe(self) -> str:
        if not self.needed:
            return f"use {self.image} ({self.reason})"
        return f"build {self.image} ({self.reason}" + (
            f"; wheels from {self.wheelhouse})" if self.wheelhouse else ")"
        )


@dataclass(frozen=True)
class WriteRelease:
    """Number the release and write its rendered files (compose.yaml, release.json)."""

    release: int
    directory: str

    def describe(self) -> str:
        return f"record release {self.release} in {self.directory}"


@dataclass(frozen=True)
class Stop:
    release: int
    container: str
    reason: str
    only_if_running: bool = False  # a restore stops a failed release only if it still runs
    url: str | None = None  # where it answers now (a pre-stop hook drains this upstream)
    # a serving release: after the pre-stop hook, wait at most this long until the server reports
    # no running and no queued request (deploy/drain.py); None: stopped at once (a failed release)
    drain_s: float | None = None

    def describe(self) -> str:
        drain = (
            f"; drained first, at most {self.drain_s:g} s" if self.drain_s is not None and self.url else ""
        )
        return f"stop release {self.release} ({self.reason}{drain})"


@dataclass(frozen=True)
class PrepareCache:
    release: int
    image: str
    volume: str
    # created / kept / wiped as planned from the facts; "after-build" when the image that
    # decides it is not built yet. The executor decides again from what the volume holds then.
    action: Literal["created", "kept", "wiped", "after-build", "unknown"]
    reason: str

    def describe(self) -> str:
        return f"JIT cache {self.volume} for release {self.release}: {self.action} ({self.reason})"


@dataclass(frozen=True)
class Start:
    release: int
    project: str
    new: bool  # True: `docker compose up` of a new release; False: start its stopped container
    bind: str | None = None  # a new release's published address and port, checked free again
    port: int | None = None
    # the compose secrets (names) whose values the executor reads from the host just
    # before `docker compose up` and hands to that one process's environment
    secrets: list[str] = field(default_factory=list)
    # where each of those values is read (a variable, a file: never a value)
    sources: tuple[ReleaseSecret, ...] = field(default=(), repr=False, compare=False, metadata=CARRIED)

    def describe(self) -> str:
        if not self.new:
            return f"start release {self.release} again"
        with_secrets = f", secrets {', '.join(self.secrets)} read from the host" if self.secrets else ""
        return f"start release {self.release} ({self.project}{with_secrets})"


@dataclass(frozen=True)
class WaitHealthy:
    release: int
    budget_s: float
    path: str
    rule: str = ""  # how the profile's health fields make budget_s (HealthSpec.budget_rule)

    def describe(self) -> str:
        rule = f" = {self.rule}" if self.rule else ""
        return f"wait until release {self.release} is healthy ({self.path}, budget {self.budget_s:g} s{rule})"


@dataclass(frozen=True)
class Qualify:
    release: int
    suites: list[str]
    settings: dict[str, dict[str, Any]]
    limit: int | None
    report_dir: str
    overrides: dict[str, dict[str, Any]] | None = None  # on top of the profile's (a rollout's quick check)
    # the profile the suites read (and the key clients send)
    spec: Profile | None = field(default=None, repr=False, compare=False, metadata=CARRIED)

    def describe(self) -> str:
        limit = f", --limit {self.limit}" if self.limit is not None else ""
        return f"qualify release {self.release}: {', '.join(self.suites)}{limit}"


@dataclass(frozen=True)
class CutOver:
    release: int
    previous: int | None  # the rollback target from now on
    next_release: int
    event: Literal["cutover", "rollback"] = "cutover"

    def describe(self) -> str:
        return f"cut over to release {self.release} (rollback target: {self.previous or 'none'})"


@dataclass(frozen=True)
class Prune:
    releases: list[int]
    retention: int

    def describe(self) -> str:
        which = ", ".join(map(str, self.releases)) or "none"
        return f"prune stopped releases beyond {self.retention}: {which}"


@dataclass(frozen=True)
class Remove:
    """Remove a release: its container and its compose project (with the project's network)."""

    release: int
    project: str
    container: str

    def describe(self) -> str:
        return f"remove release {self.release} ({self.container}, compose project {self.project} and its network)"


@dataclass(frozen=True)
class RemoveSlot:
    """What a slot keeps beyond its releases: networks left by label, and with --volumes its JIT
    cache volume and its state folder (pointers, rendered files, reports)."""

    networks: list[str]
    volume: str | None = None
    state: str | None = None

    def describe(self) -> str:
        parts = [f"remove networks left of the slot: {', '.join(self.networks) or 'none'}"]
        parts.append(f"remove JIT cache volume {self.volume}" if self.volume else "keep the JIT cache volume")
        parts.append(
            f"remove state {self.state}" if self.state else "keep the slot's state (journal, pointers, files)"
        )
        return "; ".join(parts)


Step = (
    Build
    | WriteRelease
    | Stop
    | PrepareCache
    | Start
    | WaitHealthy
    | Qualify
    | CutOver
    | Prune
    | Remove
    | RemoveSlot
)
# what a plan does; "tune": a tune candidate's launch, or tune stopping and bringing back what served
Action = Literal["up", "rollback", "prune", "stop", "start", "down", "tune"]


@dataclass(frozen=True)
class Plan:
    """What one command will do on one slot, as the planner decided it (never edited after). `steps` run in order; if one fails (or Ctrl-C)
    after the hand-over began (a Stop or a Start ran), `restore` runs, then the error is
    raised. A rollout drives several slots' plans; hooks run at step boundaries."""

    action: Action
    slot: str
    release: int | None  # the release this plan makes or brings back
    serving: int | None  # what serves on the slot now
    fallback: int | None  # what a failure brings back
    steps: list[Step]
    restore: list[Step] = field(default_factory=list)
    url: str | None = None  # where the release will answer
    port_source: str | None = None  # why that port: --port, kept from the slot's release, the profile's
    profile: str | None = None
    image: str | None = None
    compose: dict[str, Any] | None = None  # the rendered compose document (up)
    record: dict[str, Any] | None = None  # release.json (up)
    warnings: list[str] = field(default_factory=list)
    skip_qualify: bool = False
    checks: list[str] = field(default_factory=list)  # what the checks before stopping found (shown)
    memory: dict[str, Any] | None = None  # the memory plan's summary (journal: memory_plan), "skipped"
    inputs: list[str] = field(default_factory=list)  # where the weights and each secret come from and go
    model: dict[str, Any] | None = None  # the weights it serves (weights.ModelPlan.record)
    # why a real `up` refuses to start this plan on the slot's cards (a CPU image: `up --dry-run`
    # and `deploytool cpu-twin` still plan it); the same reason is among the warnings
    not_on_cards: str | None = field(default=None, repr=False, compare=False, metadata=CARRIED)
    in_place_of: int | None = None  # start --release N: the slot's current release it is started instead of

    def to_json(self) -> dict[str, Any]:
        def step(s: Step) -> dict[str, Any]:
            return {"step": type(s).__name__, "describe": s.describe(), **shown(s)}

        return {
            **shown(self, leave=("steps", "restore")),
            "steps": [step(s) for s in self.steps],
            "restore": [step(s) for s in self.restore],
        }

    def lines(self) -> list[str]:
        """The plan as a person reads it."""
        out = [
            f"{self.action} on slot {self.slot}: serving now {self.serving or 'nothing'}"
            + (f", would make release {self.release}" if self.action == "up" else "")
        ]
        if self.in_place_of is not None:
            out.append(
                f"  starts release {self.release} in place of the slot's current release {self.in_place_of} "
                "(--release)"
            )
        if self.url:
            out.append(f"  url: {self.url}" + (f" (port: {self.port_source})" if self.port_source else ""))
        out += [f"  warning: {w}" for w in self.warnings]
        out += [f"  checked: {c}" for c in self.checks]
        out += [f"  {line}" for line in self.inputs]
        out += [f"  {i}. {s.describe()}" for i, s in enumerate(self.steps, 1)]
        if self.restore:
            out.append("  on failure or Ctrl-C after the hand-over began:")
            out += [f"     - {s.describe()}" for s in self.restore]
        return out
