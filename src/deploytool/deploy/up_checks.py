"""The checks before stopping: every check that can refuse an `up` runs here, on the options
it was asked with, before any step, so nothing is stopped for a request that was never going
to work: the profile, the cards, the weights and the secrets, SGLang's memory plan on the card,
the port, the qualify suites and their settings, the limits. Pure, like plan.py, which makes
the plan once these pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DeployError, FieldError, UsageError
from ..files import to_jsonable
from ..host.card_slots import group_problems
from ..host.fit import classify
from ..host.releases import Release
from ..host.slots import DEFAULT_RETENTION, Slot
from ..memory.gate import MemoryCheck, memory_check
from ..profiles import Profile, ProfileStore
from ..release import weights
from ..release.compose import refuse_exposure
from .facts import Facts


@dataclass(frozen=True)
class UpOptions:
    """What one `up` of a slot is asked, as the CLI (or a rollout, a tune candidate) built it:
    frozen, so every check and the plan read the same values; a caller that needs one changed
    builds another with dataclasses.replace."""

    profile_name: str | None = None
    host_port: int | None = None
    bind: str = "127.0.0.1"
    expose_without_key: bool = False  # publish beyond loopback without an API key: the person said so
    skip_qualify: bool = False
    skip_memory_plan: bool = False
    qualify_suites: tuple[str, ...] | None = None
    qualify_limit: int | None = None
    qualify_overrides: dict[str, dict[str, Any]] | None = None  # a rollout's quick performance check
    retention: int = DEFAULT_RETENTION
    profiles_dirs: tuple[Path, ...] | None = None
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
            raise FieldError(
                "profile_name",
                f"slot {slot.name} has no release yet: say which profile",
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
        raise FieldError("retention", "keep at least 1 stopped release", value=str(options.retention))
    if options.qualify_limit is not None and options.qualify_limit < 1:
        raise FieldError(
            "qualify_limit", "expected a positive number of items", value=str(options.qualify_limit)
        )
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
        unlisted = inventory.by_uuid(uuid) is None
        if unlisted and uuid.startswith("MIG-") and not any(g.mig_devices for g in inventory.gpus):
            warnings.append(
                f"{uuid} is a MIG device NVML did not list here: it is not checked against the profile"
            )
            continue
        cards.append(inventory.card(uuid))
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
