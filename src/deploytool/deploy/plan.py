"""Deploy decisions as pure functions: (facts, profile, options) -> Plan.

Every check that can refuse an `up` runs here, before any step, so nothing is stopped for
a request that was never going to work: the profile, the cards, the weights and the
secrets, SGLang's memory plan on the card, the port, the qualify suites
and their settings, the limits. Nothing here touches the engine or writes a file;
the tests call these with hand-made facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DeployError, UsageError
from ..files import to_jsonable
from ..host.card_slots import group_problems
from ..host.fit import classify
from ..host.releases import Release, published_url
from ..host.slots import DEFAULT_RETENTION, Slot
from ..image.build import BuildPlan, plan_build, stale_reason
from ..memory.gate import MemoryCheck, memory_check
from ..profiles import Profile, ProfileStore
from ..release import secrets, weights
from ..release.compose import RenderRequest, refuse_exposure, render_compose, render_notes
from ..release.state import release_path
from .facts import Facts
from .ownership import refuse_taking_over
from .steps import (
    Action,
    Build,
    CutOver,
    Plan,
    PrepareCache,
    Prune,
    Qualify,
    Start,
    Step,
    Stop,
    WaitHealthy,
    WriteRelease,
)

__all__ = [
    "DEFAULT_RETENTION",
    "NewRelease",
    "UpOptions",
    "new_release",
    "plan_prune",
    "plan_rollback",
    "plan_up",
]


@dataclass
class UpOptions:
    profile_name: str | None = None
    host_port: int | None = None
    bind: str = "127.0.0.1"
    expose_without_key: bool = False  # publish beyond loopback without an API key: the person said so
    skip_qualify: bool = False
    skip_memory_plan: bool = False
    qualify_suites: list[str] | None = None
    qualify_limit: int | None = None
    qualify_overrides: dict[str, dict[str, Any]] | None = None  # a rollout's quick performance check
    retention: int = DEFAULT_RETENTION
    profiles_dirs: list[Path] | None = None
    wheelhouse: Path | None = None  # as given to `build --wheelhouse`: part of the image's tag
    # `up --dry-run`: weights that are not here yet are a warning, not a refusal (a plan is
    # wanted before a download of tens of GB; the real `up` still refuses without them)
    dry_run: bool = False
    # False for what publishes no port (the CPU twin): the port is neither probed nor checked,
    # since whoever listens there takes nothing from it
    publishes: bool = True
    drain_timeout: float | None = (
        None  # the serving release's drain (None: its recorded health.drain_timeout)
    )
    take_over: bool = False  # stop a serving release started from another state folder (ownership.py)


def choose_profile(slot: Slot, name: str | None, fallback: Release | None, store: ProfileStore) -> Profile:
    """--profile, else the profile of the release that serves (or last served) the slot."""
    if name is None:
        if fallback is None:
            raise UsageError(
                f"slot {slot.name} has no release yet: say which profile with --profile NAME",
                hint="`deploytool profiles list` shows them",
            )
        name = fallback.profile
    profile = store.get(name)
    if profile.abstract:
        raise UsageError(
            f"profile {name!r} is abstract (a base for others to extend); deploy one that extends it"
        )
    if slot.is_cpu and not profile.is_simulator:
        raise UsageError(
            f"profile {name!r} runs SGLang on GPUs; the CPU slot takes the reference runtime only",
            hint="use --gpu UUID for this profile, or --profile sim for the CPU slot",
        )
    return profile


@dataclass
class Validated:
    """What the checks before stopping found: warnings, and what the plan reports of them."""

    warnings: list[str] = field(default_factory=list)
    memory: MemoryCheck = field(default_factory=MemoryCheck)
    not_on_cards: str | None = None  # why a real `up` would not start it on the slot's cards

    @property
    def checks(self) -> list[str]:  # the lines `up --dry-run` shows above the steps
        return [line for line in (self.memory.describe(),) if line]


def publish_port(options: UpOptions, fallback: Release | None, profile: Profile) -> tuple[int, str]:
    """The host port a new release publishes on, and why: --port when given, else the port the
    slot's release publishes on now (a gateway pointed at the slot keeps finding it after the
    cut-over), else the profile's."""
    if options.host_port is not None:
        return options.host_port, "--port"
    if fallback is not None and fallback.host_port:
        what = "serving" if fallback.running else "last cut over"
        return (
            fallback.host_port,
            f"kept from release {fallback.release}, the slot's {what} release (--port to move it)",
        )
    return profile.server.port, "the profile's default (no release on slot {slot} yet)"


def validate_before_stopping(facts: Facts, profile: Profile, options: UpOptions) -> Validated:
    """Every check that can refuse an up. Runs before any step, so a refusal leaves the
    serving release untouched: the options, the cards, the model's files, SGLang's memory
    plan on the slot's card, the port. Anything a started release would fail on."""
    if options.retention < 1:
        raise UsageError(f"--retention {options.retention}: keep at least 1 stopped release")
    if options.qualify_limit is not None and options.qualify_limit < 1:
        raise UsageError(f"--limit {options.qualify_limit}: expected a positive number of items")
    refuse_exposure(profile, options.bind, allowed=options.expose_without_key)
    warnings = check_cards(facts, profile)
    cpu_image = cpu_image_on_cards(facts.slot, profile)
    if cpu_image:
        warnings.append(cpu_image)
    if facts.engine_absent:
        from .no_engine import engine_note

        warnings.append(engine_note(facts.engine_absent))
    if isinstance(facts.inputs_error, weights.ModelMissing) and options.dry_run:
        error = facts.inputs_error
        warnings.append(
            f"the weights are not here, so a real `up` refuses this plan: {error.message}"
            + (f" ({error.hint})" if error.hint else "")
        )
    elif facts.inputs_error is not None:  # weights not there, a secret unreadable
        raise facts.inputs_error
    if facts.inputs is not None:
        warnings += facts.inputs.warnings
    if facts.model_folder_exists is False and options.dry_run:
        warnings.append(
            f"model.host_path {profile.model.host_path} is not a folder on this host: a real `up` "
            "refuses until the weights are there"
        )
    elif facts.model_folder_exists is False:
        raise UsageError(
            f"profile {profile.name}: model.host_path {profile.model.host_path} is not a folder on this "
            "host, so the release could not load its weights",
            hint="download the model there, or point model.host_path at where it is",
        )
    memory = memory_check(facts.memory, profile, skip=options.skip_memory_plan, slot=facts.slot.name)
    warnings += memory.warnings
    port = facts.port if options.publishes else None
    if port is not None and not port.free:
        if port.error:
            raise DeployError(f"cannot publish on {port.bind}:{port.port}: {port.error}")
        serving = facts.serving
        if not (serving and port.holder_release == (facts.slot.name, serving.release)):
            raise DeployError(
                f"port {port.port} on {port.bind} is already in use by {port.holder}",
                hint="free it, or publish this slot on another port with --port",
            )
    if options.skip_qualify:
        warnings.append("--skip-qualify: this release takes traffic without acceptance suites")
    return Validated(warnings=warnings, memory=memory, not_on_cards=cpu_image)


def cpu_image_on_cards(slot: Slot, profile: Profile) -> str | None:
    """Why a GPU slot's release could not serve from the profile's image, when it is an sglang
    CPU image (image.cuda: null: no CUDA torch, no kernels). A dry run plans it (its compose
    document is checked, and `deploytool cpu-twin` starts its twin); a real `up` refuses it."""
    if slot.is_cpu or profile.image.recipe != "sglang" or profile.image.cuda is not None:
        return None
    return (
        f"profile {profile.name} builds a CPU image (image.cuda: null): its SGLang has no CUDA torch or kernels "
        f"and cannot serve on slot {slot.name}'s card, so a real `up` refuses it; "
        f"`deploytool cpu-twin` starts this release's CPU twin"
    )


def check_cards(facts: Facts, profile: Profile) -> list[str]:
    slot, inventory = facts.slot, facts.inventory
    wanted = profile.match.gpu_count
    if not slot.is_cpu and not profile.is_simulator and len(slot.gpus) > wanted:
        # The slot reserves every card it names: a server that uses fewer would hold the
        # others idle, out of every other slot's reach.
        raise UsageError(
            f"profile {profile.name} uses {wanted} GPU{'s' if wanted != 1 else ''}, slot {slot.name} "
            f"names {len(slot.gpus)}: the others would be reserved and left idle",
            hint=f"give {wanted} --gpu per slot; `deploytool slots --profile {profile.name}` groups this "
            "host's cards into the profile's slots",
        )
    if slot.is_cpu or inventory is None:
        return []
    if inventory.error:
        return [f"cannot check the slot's cards: {inventory.error}"]
    warnings, cards = [], []
    for uuid in slot.gpus:
        card = inventory.by_uuid(uuid)
        if card is None and uuid.startswith("MIG-") and not any(g.mig_devices for g in inventory.gpus):
            warnings.append(
                f"{uuid} is a MIG device NVML did not list here: it is not checked against the profile"
            )
            continue
        if card is None:
            known = ", ".join(g.uuid for g in inventory.gpus) or "none"
            raise UsageError(
                f"--gpu {uuid}: no such GPU on this machine", hint=f"this machine's GPUs: {known}"
            )
        cards.append(card)
    if cards:
        fit = classify(profile, cards)
        if fit.verdict == "incompatible":
            raise UsageError(
                f"profile {profile.name} cannot run on slot {slot.name}: {'; '.join(fit.reasons)}"
            )
        if fit.verdict != "runnable":
            warnings.append(f"profile {profile.name} on slot {slot.name}: {'; '.join(fit.reasons)}")
        # Cards chosen by hand: how they are joined is said, not refused (`deploytool slots`
        # refuses such a group when it chooses).
        refusals, notes = group_problems(cards, inventory)
        warnings += [f"slot {slot.name}: {text}" for text in refusals + notes]
    return warnings


def resolve_qualify(
    profile: Profile, suites: list[str] | None, overrides: dict[str, dict] | None = None
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The suites `up` would run and their validated settings (bad names and settings are
    refused here, before the serving release is stopped)."""
    from ..qualify.config import select_suites, suite_settings
    from ..qualify.suites import registry

    modules = registry()
    names = select_suites(modules, profile, suites)
    settings = suite_settings(modules, profile, overrides)
    return names, {name: to_jsonable(settings[name]) for name in names}


@dataclass(frozen=True)
class NewRelease:
    """A new release of the slot, checked before anything is stopped and numbered: what `up`
    and a tune candidate launch alike. Each step it makes is made the same way for both;
    plan_up and plan_candidate each list which of them they run, in which order."""

    facts: Facts
    profile: Profile
    options: UpOptions
    validated: Validated
    number: int
    build: BuildPlan
    stale: str | None  # why the image is built; None: an image with the same inputs is on the engine
    request: RenderRequest
    secrets: tuple[secrets.ReleaseSecret, ...]  # where each is read from (never a value)
    port_source: str

    def build_step(self) -> Build:
        wheelhouse = self.options.wheelhouse
        return Build(
            profile=self.profile.name,
            image=self.build.tag,
            needed=self.stale is not None,
            reason=self.stale or "an image with the same inputs is on the engine",
            wheelhouse=str(wheelhouse) if wheelhouse else None,
            spec=self.profile,
        )

    def write_step(self) -> WriteRelease:
        return WriteRelease(
            release=self.number, directory=str(release_path(self.facts.slot.name, self.number))
        )

    def cache_step(self) -> PrepareCache:
        return _cache_step(self.facts, self.number, self.build.tag, planned=self.stale is None)

    def start_step(self) -> Start:
        return Start(
            release=self.number,
            project=self.facts.slot.project(self.number),
            new=True,
            bind=self.options.bind,
            port=self.request.port,
            secrets=[s.name for s in self.secrets],
            sources=self.secrets,
        )

    def wait_step(self) -> WaitHealthy:
        health = self.profile.health
        return WaitHealthy(
            release=self.number, budget_s=health.budget_seconds(), path=health.path, rule=health.budget_rule()
        )

    def stop_step(self, reason: str) -> Stop:
        """The restore's first step: this release stopped if it still runs."""
        return Stop(
            release=self.number,
            container=f"{self.facts.slot.project(self.number)}-server",
            reason=reason,
            only_if_running=True,
        )

    def plan(self, action: Action, *, steps: list[Step], restore: list[Step], fallback: int | None) -> Plan:
        """The plan that launches this release: what it shows and what its steps read."""
        facts, profile, options, request = self.facts, self.profile, self.options, self.request
        # new_release always sets the model; model_plan says so to the type checker without a cast
        model, validated = request.model_plan, self.validated
        return Plan(
            action=action,
            slot=facts.slot.name,
            release=self.number,
            serving=facts.serving.release if facts.serving else None,
            fallback=fallback,
            steps=steps,
            restore=restore,
            url=published_url(options.bind, request.port),
            profile=profile.name,
            image=self.build.tag,
            port_source=self.port_source.format(slot=facts.slot.name),
            compose=render_compose(request),
            warnings=validated.warnings,
            skip_qualify=options.skip_qualify,
            checks=validated.checks,
            inputs=render_notes(request),
            model=model.record(),
            memory=(
                {**validated.memory.summary, "skipped": validated.memory.skipped}
                if validated.memory.summary
                else None
            ),
            not_on_cards=validated.not_on_cards,
            # the weights it serves and where its secrets come from (never values)
            record={
                "profile": profile.name,
                "image": self.build.tag,
                "health": profile.health.model_dump(mode="json"),
                "model": model.record(),
                "bind": options.bind,
                "watch": profile.watch.model_dump(mode="json"),
                **({"exposed_without_key": True} if request.exposed_without_key else {}),
                **secrets.record(profile, list(self.secrets)),
            },
        )


def new_release(facts: Facts, profile: Profile, options: UpOptions) -> NewRelease:
    """Every check before stopping, then the release's number, image and compose request."""
    validated = validate_before_stopping(facts, profile, options)
    port, port_source = publish_port(options, facts.fallback, profile)
    gathered = facts.image
    build = (
        gathered.build
        if gathered is not None and gathered.build is not None and gathered.wheelhouse == options.wheelhouse
        else plan_build(profile, wheelhouse=options.wheelhouse)
    )
    number = max([facts.pointers.next_release] + [r.release + 1 for r in facts.releases])
    # the checked weights and the secrets' places (hand-made facts: planned, unchecked)
    model = facts.inputs.model if facts.inputs else weights.plan_model(profile)
    planned_secrets = facts.inputs.secrets if facts.inputs else secrets.plan_secrets(profile)
    request = RenderRequest(
        profile=profile,
        slot=facts.slot,
        release=number,
        image=build.tag,
        host_port=port,
        bind=options.bind,
        model=model,
        secrets=planned_secrets,
        runtime_notes=tuple(build.inputs.notes),
        expose_without_key=options.expose_without_key,
    )
    stale = stale_reason(build, gathered.labels if gathered else None, gathered.base_id if gathered else None)
    return NewRelease(
        facts=facts,
        profile=profile,
        options=options,
        validated=validated,
        number=number,
        build=build,
        stale=stale,
        request=request,
        secrets=tuple(planned_secrets),
        port_source=port_source,
    )


def plan_up(facts: Facts, profile: Profile, options: UpOptions, *, action: str = "up") -> Plan:
    refuse_taking_over(facts, [facts.serving], action, options.take_over)
    new = new_release(facts, profile, options)
    number, serving, fallback = new.number, facts.serving, facts.fallback
    steps: list[Step] = [new.build_step(), new.write_step()]
    if serving:
        steps.append(
            Stop(
                release=serving.release,
                container=serving.container_name,
                reason=f"handing over to {number}; kept for rollback",
                url=serving.url,
                drain_s=drain_for(facts, serving.release, options.drain_timeout),
            )
        )
    steps += [new.cache_step(), new.start_step(), new.wait_step()]
    if not options.skip_qualify:
        names, settings = resolve_qualify(profile, options.qualify_suites, options.qualify_overrides)
        steps.append(
            Qualify(
                release=number,
                suites=names,
                settings=settings,
                limit=options.qualify_limit,
                report_dir=str(release_path(facts.slot.name, number) / "qualify"),
                overrides=options.qualify_overrides,
                spec=profile,
            )
        )
    previous = fallback.release if fallback else facts.pointers.previous
    steps.append(CutOver(release=number, previous=previous, next_release=number + 1))
    steps.append(
        Prune(
            releases=prunable(facts, current=number, previous=previous, retention=options.retention),
            retention=options.retention,
        )
    )
    restore: list[Step] = [new.stop_step("failed, kept for inspection")]
    if fallback:
        restore += bring_back(facts, fallback)
    return new.plan("up", steps=steps, restore=restore, fallback=fallback.release if fallback else None)


def _cache_step(facts: Facts, release: int, image: str, *, planned: bool) -> PrepareCache:
    from ..release.cache import decide

    volume = facts.slot.cache_volume()
    known = facts.cache
    if not planned or known is None or known.expected is None:
        return PrepareCache(
            release, image, volume, "after-build", "decided from the new image's toolchain once it is built"
        )
    if known.state is None:
        return PrepareCache(
            release, image, volume, "unknown", "the volume could not be read; decided when applied"
        )
    decision = decide(known.state, known.expected)
    return PrepareCache(release, image, volume, decision.action, decision.reason)


def bring_back(facts: Facts, release: Release) -> list[Step]:
    """Start a stopped release again and verify it healthy; its kernels must match the
    cache, which another release may have stamped with another toolchain."""
    health = facts.health.get(release.release)
    budget = health.budget_seconds() if health else 0
    return [
        PrepareCache(
            release.release,
            release.image,
            facts.slot.cache_volume(),
            "unknown",
            "checked against this release's toolchain when applied",
        ),
        Start(release=release.release, project=facts.slot.project(release.release), new=False),
        WaitHealthy(
            release=release.release,
            budget_s=budget,
            path=health.path if health else "/health",
            rule=health.budget_rule() if health else "",
        ),
    ]


def prunable(facts: Facts, *, current: int | None, previous: int | None, retention: int) -> list[int]:
    """Stopped releases beyond `retention` (counting the rollback target), oldest first;
    never the current release or the rollback target."""
    protected = {current, previous}
    serving = facts.serving
    stopped = [
        r
        for r in facts.releases
        if (not r.running or (serving and r.release == serving.release)) and r.release not in protected
    ]
    keep = max(retention - (1 if previous is not None else 0), 0)
    return sorted(r.release for r in sorted(stopped, key=lambda r: r.release, reverse=True)[keep:])


def plan_prune(facts: Facts, retention: int = DEFAULT_RETENTION) -> Plan:
    if retention < 1:
        raise UsageError(f"--retention {retention}: keep at least 1 stopped release")
    serving = facts.serving
    current = serving.release if serving else facts.pointers.current
    doomed = [
        n
        for n in prunable(facts, current=current, previous=facts.pointers.previous, retention=retention)
        if not (serving and n == serving.release)
    ]
    return Plan(
        action="prune",
        slot=facts.slot.name,
        release=None,
        serving=current,
        fallback=None,
        steps=[Prune(releases=doomed, retention=retention)],
    )


def drain_for(facts: Facts, release: int, override: float | None) -> float:
    """How long a stop of `release` waits for its requests: --drain-timeout, else its record's."""
    if override is not None:
        if override < 0:
            raise UsageError(f"--drain-timeout {override:g}: expected 0 seconds or more")
        return override
    health = facts.health.get(release)
    return float(health.drain_timeout if health else 30)


def plan_rollback(facts: Facts, drain_timeout: float | None = None, *, take_over: bool = False) -> Plan:
    """Stop the current release, start the rollback target and verify it; if the target
    fails, the current release is brought back (a card holds one copy of the model)."""
    slot, current = facts.slot, facts.serving
    refuse_taking_over(facts, [current], "rollback", take_over)
    target_number = facts.pointers.previous
    target = facts.by_number(target_number)
    if target is None:
        why = (
            "it has no previous release"
            if target_number is None
            else f"its previous release {target_number} no longer exists on the engine"
        )
        raise DeployError(f"cannot roll back slot {slot.name}: {why}")
    if current is not None and current.release == target.release:
        raise DeployError(f"release {target.release} is already serving on slot {slot.name}")
    stopped = current.release if current else facts.pointers.current or target.release
    steps: list[Step] = []
    if current is not None:
        steps.append(
            Stop(
                release=current.release,
                container=current.container_name,
                reason="rolling back",
                url=current.url,
                drain_s=drain_for(facts, current.release, drain_timeout),
            )
        )
    steps += bring_back(facts, target)
    steps.append(
        CutOver(
            release=target.release,
            previous=stopped,
            next_release=facts.pointers.next_release,
            event="rollback",
        )
    )
    restore: list[Step] = [
        Stop(
            release=target.release,
            container=target.container_name,
            reason="failed to come back",
            only_if_running=True,
        )
    ]
    if current is not None:
        restore += bring_back(facts, current)
    return Plan(
        action="rollback",
        slot=slot.name,
        release=target.release,
        serving=current.release if current else None,
        fallback=current.release if current else None,
        steps=steps,
        restore=restore,
        url=target.url,
        profile=target.profile,
        image=target.image,
        port_source=f"release {target.release}'s own",
    )
