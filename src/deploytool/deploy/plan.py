"""Deploy decisions as pure functions: (facts, profile, options) -> Plan.

Every check that can refuse an `up` (up_checks.py) runs while its plan is made, before any
step, so nothing is stopped for a request that was never going to work. Nothing here touches
the engine or reads or writes a file: what was read (the image's build plan, its recipe's inputs
hashed; the weights checked; the secrets' places) comes in the facts, which the tests make by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DeployError, FieldError
from ..host.releases import Release, published_url
from ..host.slots import DEFAULT_RETENTION
from ..image.build import BuildPlan, stale_reason
from ..profiles import Profile
from ..release import secrets, weights
from ..release.compose import RenderRequest, render_compose, render_notes
from ..release.state import release_path
from .facts import Facts, ImageFacts
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
from .up_checks import UpOptions, Validated, publish_port, resolve_qualify, validate_before_stopping

__all__ = [
    "DEFAULT_RETENTION",
    "NewRelease",
    "UpOptions",
    "new_release",
    "plan_prune",
    "plan_rollback",
    "plan_up",
]


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


def _gathered_image(facts: Facts, options: UpOptions) -> tuple[ImageFacts, BuildPlan]:
    """The image and its build plan, as gather_facts made them: planning hashes no recipe input and
    reads no file of its own, so the facts carry it (with the wheelhouse it was made for)."""
    gathered = facts.image
    if gathered is None or gathered.build is None or gathered.wheelhouse != options.wheelhouse:
        raise DeployError(
            "the facts carry no build plan for this image: gather them with gather_facts "
            f"(wheelhouse {options.wheelhouse})"
        )
    return gathered, gathered.build


def new_release(facts: Facts, profile: Profile, options: UpOptions) -> NewRelease:
    """Every check before stopping, then the release's number, image and compose request."""
    validated = validate_before_stopping(facts, profile, options)
    port, port_source = publish_port(options, facts.fallback, profile)
    image, build = _gathered_image(facts, options)
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
    stale = stale_reason(build, image.labels, image.base_id)
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
        names, settings = resolve_qualify(
            profile,
            list(options.qualify_suites) if options.qualify_suites is not None else None,
            options.qualify_overrides,
        )
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
        raise FieldError("retention", "keep at least 1 stopped release", value=str(retention))
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
            raise FieldError("drain_timeout", "expected 0 seconds or more", value=f"{override:g}")
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
