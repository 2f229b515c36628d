"""A rollout as data: one `up` plan per slot, taken --max-unavailable slots at a time.

Pure, like plan.py: (facts of every slot, profile, request) -> RolloutPlan. Every check that
can refuse a rollout runs here, before any slot is touched: the slots, their ports (each slot
keeps the port its release is published on, so the gateway's upstreams stay put), the
qualify suites of the canary and of the others, and each slot's own up plan.

The first slot is the canary: it runs the full qualification (the profile's qualify set)
unless --canary-qualify quick. The others run the profile's `rollout.qualify` set (default:
preflight, contract and the quick form of performance): they serve the image the canary
qualified, so a shorter check that each card serves it is enough.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import FieldError, UsageError
from ..host.slots import DEFAULT_RETENTION, Slot
from ..image.build import plan_build
from ..profiles import Profile
from .facts import Facts
from .plan import plan_up
from .steps import Build, Plan
from .up_checks import UpOptions

if TYPE_CHECKING:
    from ..host.card_slots import SlotPlan


@dataclass(frozen=True)
class RolloutRequest:
    """One rollout, every value checked where it was built (the CLI: its options): the slots in
    order (the first is the canary), or `all_gpus`: the slots this host's cards make for the
    profile, which the rollout plans from the cards (rollout.py) and journals as slots."""

    profile_name: str
    slots: tuple[Slot, ...] = ()
    all_gpus: bool = False
    max_unavailable: int = 1
    canary_qualify: Literal["full", "quick"] = "full"
    undo_on_failure: bool = False
    qualify_limit: int | None = None
    retention: int = DEFAULT_RETENTION
    profiles_dirs: tuple[Path, ...] | None = None
    dry_run: bool = False  # each slot's plan as `up --dry-run` makes it (weights not yet here: warned)
    drain_timeout: float | None = (
        None  # each slot's stop waits this long for its requests (None: its record's)
    )
    take_over: bool = (
        False  # a slot whose release another state folder started is upgraded too (ownership.py)
    )

    def __post_init__(self) -> None:
        if self.max_unavailable < 1:
            raise FieldError(
                "max_unavailable", "at least 1 slot is taken out at a time", value=str(self.max_unavailable)
            )
        if self.canary_qualify not in ("full", "quick"):
            raise FieldError("canary_qualify", "expected full or quick", value=repr(self.canary_qualify))

    @property
    def profile_dirs(self) -> list[Path] | None:
        """The profile folders as the profile store takes them."""
        return list(self.profiles_dirs) if self.profiles_dirs else None

    def to_json(self) -> dict[str, Any]:
        """What the journal keeps, so that --resume can run the same rollout again."""
        return {
            "profile": self.profile_name,
            "slots": [{"name": s.name, "gpus": list(s.gpus)} for s in self.slots],
            "max_unavailable": self.max_unavailable,
            "canary_qualify": self.canary_qualify,
            "undo_on_failure": self.undo_on_failure,
            "qualify_limit": self.qualify_limit,
            "retention": self.retention,
            "profiles_dirs": [str(p) for p in self.profiles_dirs or ()],
            "drain_timeout": self.drain_timeout,
            "take_over": self.take_over,
        }


@dataclass
class RolloutPlan:
    id: str
    profile: str
    image: str
    build: Build
    waves: list[list[str]]  # slot names, each wave taken out of service together
    slots: list[Plan]  # one up plan per slot, in order, without its Build (built once, first)
    canary: str
    max_unavailable: int
    undo_on_failure: bool
    request: RolloutRequest  # what it was planned for, its slots named (--all-gpus resolved)
    done: list[str] = field(default_factory=list)  # slots a resumed rollout already upgraded
    warnings: list[str] = field(default_factory=list)
    # what --all-gpus left out and why: said before the rollout starts, and with the warnings
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "profile": self.profile,
            "image": self.image,
            "build": self.build.describe(),
            "waves": self.waves,
            "canary": self.canary,
            "max_unavailable": self.max_unavailable,
            "undo_on_failure": self.undo_on_failure,
            "done": self.done,
            "warnings": self.warnings + self.notes,
            "slots": [p.to_json() for p in self.slots],
        }

    def lines(self) -> list[str]:
        out = [
            f"rollout {self.id}: {self.profile} ({self.image}) on {len(self.waves)} wave(s) of at most "
            f"{self.max_unavailable} slot(s) out of service at a time; canary: {self.canary}",
            f"  0. {self.build.describe()} (once, for every slot)",
        ]
        out += [f"  warning: {w}" for w in self.warnings + self.notes]
        if self.done:
            out.append(f"  already upgraded by this rollout: {', '.join(self.done)}")
        for number, wave in enumerate(self.waves, 1):
            out.append(f"  wave {number}: {', '.join(wave)}")
        for plan in self.slots:
            out += ["    " + line for line in plan.lines()]
        after = (
            "roll back the slots this rollout upgraded"
            if self.undo_on_failure
            else "leave the upgraded slots on the new release"
        )
        out.append(
            f"  on a failure: restore the failing slot, stop, and {after}; slots not reached are untouched"
        )
        return out


def waves(slots: list[str], max_unavailable: int) -> list[list[str]]:
    """Slots in order, `max_unavailable` at a time; the canary alone in the first wave."""
    if not slots:
        return []
    rest = slots[1:]
    return [[slots[0]]] + [rest[i : i + max_unavailable] for i in range(0, len(rest), max_unavailable)]


def card_slots(
    request: RolloutRequest, plan: SlotPlan, serving: set[str]
) -> tuple[RolloutRequest, list[str]]:
    """The request with the slots --all-gpus asks for: the runnable ones of `plan` (the slots
    this host's cards make for the profile, in the order `deploytool slots` lists them) after
    the slots it names; and notes on what is left out. `serving`: the GPU slots that have a
    release now (one the cards no longer make is named, not touched)."""
    if not request.all_gpus:
        return request, []
    name = request.profile_name
    if not plan.slots:
        raise FieldError(
            "all_gpus",
            f"this host's cards make no slot for profile {name}",
            hint="; ".join(line.strip() for line in plan.lines()[1:]) or None,
        )
    # The cards the profile is made for; a slot that fits only with less memory is named,
    # not taken: give its --gpu to include it.
    taken = [s for s in plan.slots if s.verdict == "runnable"]
    if not taken:
        raise FieldError(
            "all_gpus",
            f"none of this host's slots for {name} is runnable as the profile is",
            hint="; ".join(f"{s.name}: {s.verdict}: {'; '.join(s.reasons)}" for s in plan.slots)
            + f"; give --gpu {plan.slots[0].uuids[0]} to take one anyway",
        )
    slots = request.slots + tuple(Slot(gpus=tuple(sorted(s.uuids))) for s in taken)
    notes = [
        f"slot {s.name} ({' + '.join(s.cards)}) is {s.verdict}, not taken by --all-gpus "
        f"({'; '.join(s.reasons)}); give --gpu {','.join(s.uuids)} to include it"
        for s in plan.slots
        if s.verdict != "runnable"
    ]
    notes += [f"{c['card']} is not used: {c['why']}" for c in plan.unused]
    notes += [
        f"slot {slot} has a release but is not one of the slots this host's cards make for {name}: left alone"
        for slot in sorted(serving - {s.name for s in slots})
    ]
    return replace(request, slots=slots, all_gpus=False), notes


def slot_up_options(profile: Profile, facts: Facts, request: RolloutRequest, *, canary: bool) -> UpOptions:
    """A slot keeps the port and address its release is published on."""
    fallback = facts.fallback
    quick = not canary or request.canary_qualify == "quick"
    suites = tuple(profile.rollout.qualify) if quick else None  # None: the profile's full set
    overrides = (
        {"performance": {"quick": True}}
        if quick and profile.rollout.quick_performance and "performance" in (suites or ())
        else None
    )
    return UpOptions(
        profile_name=profile.name,
        host_port=fallback.host_port if fallback else None,
        bind=fallback.host_ip if fallback else "127.0.0.1",
        qualify_suites=suites,
        # the slot's release was exposed on purpose: the rollout keeps that decision
        expose_without_key=bool(fallback and fallback.exposed_without_key),
        qualify_overrides=overrides,
        qualify_limit=request.qualify_limit,
        retention=request.retention,
        profiles_dirs=request.profiles_dirs,
        dry_run=request.dry_run,
        drain_timeout=request.drain_timeout,
        take_over=request.take_over,
    )


def plan_rollout(
    facts: list[Facts],
    profile: Profile,
    request: RolloutRequest,
    *,
    rollout_id: str,
    done: list[str] | None = None,
) -> RolloutPlan:
    done = list(done or [])
    names = [f.slot.name for f in facts]
    if not names:
        raise UsageError(
            "say which slots: --gpu UUID (once per slot), --all-gpus, or --cpu-slot NAME (repeatable)"
        )
    if len(set(names)) != len(names):
        raise UsageError(f"a slot is named twice: {', '.join(names)}")
    holder: dict[str, str] = {}
    for f in facts:  # a card serves one copy of the model: two slots on it would fight over its memory
        for uuid in f.slot.gpus:
            if uuid in holder:
                raise UsageError(
                    f"slots {holder[uuid]} and {f.slot.name} share the card {uuid}",
                    hint="give each card to one slot (`deploytool slots --profile NAME` groups this "
                    "host's cards)",
                )
            holder[uuid] = f.slot.name
    warnings: list[str] = []
    if len(names) > 1 and request.max_unavailable >= len(names):
        warnings.append(
            f"--max-unavailable {request.max_unavailable} takes every slot out of service at once"
        )
    ports: dict[tuple[str, int], str] = {}
    for f in facts:
        fallback = f.fallback
        if fallback is None and len(facts) > 1 and f.engine_absent:
            warnings.append(
                f"slot {f.slot.name}: no release known without an engine, so no port of its own; "
                "a rollout upgrades serving slots, each keeping its port"
            )
        elif fallback is None and len(facts) > 1 and request.dry_run:
            # a plan to read (a described host's, a first look): said, as the weights not yet here are
            warnings.append(
                f"slot {f.slot.name} has no release yet, so no port of its own: a real rollout refuses "
                "it (start it first with `deploytool up ... --port N`, each slot on its own port)"
            )
        elif fallback is None and len(facts) > 1:
            raise UsageError(
                f"slot {f.slot.name} has no release yet, so no port of its own",
                hint="a rollout upgrades serving slots: start it first with "
                "`deploytool up ... --port N` (each slot on its own port)",
            )
        if fallback is not None:
            key = (fallback.host_ip, fallback.host_port)
            if key in ports:
                raise UsageError(f"slots {ports[key]} and {f.slot.name} publish on the same port {key[1]}")
            ports[key] = f.slot.name
    todo = [f for f in facts if f.slot.name not in done]
    # The canary is the first slot; a resumed rollout whose canary already passed gives the
    # remaining slots the shorter check.
    canary = names[0]
    plans = [
        plan_up(
            f, profile, slot_up_options(profile, f, request, canary=f.slot.name == canary), action="rollout"
        )
        for f in todo
    ]
    build = next((s for p in plans for s in p.steps if isinstance(s, Build)), None) or Build(
        profile=profile.name, image=plan_build(profile).tag, needed=False, reason="no slot left to upgrade"
    )
    plans = [without_build(p) for p in plans]  # built once, before the first slot
    order = [p.slot for p in plans]
    return RolloutPlan(
        id=rollout_id,
        profile=profile.name,
        image=build.image,
        build=build,
        waves=waves(order, request.max_unavailable)
        if canary in order
        else [order[i : i + request.max_unavailable] for i in range(0, len(order), request.max_unavailable)],
        slots=plans,
        canary=canary,
        max_unavailable=request.max_unavailable,
        undo_on_failure=request.undo_on_failure,
        request=request,
        done=done,
        warnings=warnings,
    )


def slot_plan(facts: Facts, profile: Profile, request: RolloutRequest, *, canary: bool) -> Plan:
    """One slot's up plan, made again from fresh facts when its turn comes (the image is
    built by then, so the cache decision can be made from it)."""
    return without_build(
        plan_up(facts, profile, slot_up_options(profile, facts, request, canary=canary), action="rollout")
    )


def without_build(plan: Plan) -> Plan:
    """A slot's up plan in a rollout: the image was built once, before the first slot."""
    return replace(plan, steps=[s for s in plan.steps if not isinstance(s, Build)])
