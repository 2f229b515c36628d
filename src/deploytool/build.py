"""`deploytool build`: a pinned image from a profile's recipe.

plan_build() turns a profile into a BuildPlan (a build context on disk, the rendered
Dockerfile, the labels and the tag derived from a hash of every input) with no side effect on
the engine; build() applies a plan through the Docker SDK. The same inputs give the same tag,
so a second build finds its image and does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import docker.errors
import jinja2

from . import __version__, labels
from .engine import Engine
from .errors import BuildError, UsageError
from .profiles import Profile
from .recipes import load_recipe, recipe_dir
from .state import cache_dir, journal

ProgressFn = Callable[[int, int, str], None]  # (step, steps, line)


@dataclass
class BuildPlan:
    profile: str
    recipe: str
    context_dir: Path
    dockerfile: str
    tag: str
    inputs_hash: str
    base_ref: str
    base_id: str
    labels: dict[str, str]
    fingerprint: dict[str, str]
    steps: int


@dataclass
class BuildResult:
    image: str  # the tag, deploytool/<recipe>:<profile>-<hash12>
    image_id: str
    built: bool  # False when an image with the same inputs already existed
    inputs_hash: str
    labels: dict[str, str] = field(default_factory=dict)
    log_tail: list[str] = field(default_factory=list)

    @property
    def message(self) -> str:
        if self.built:
            return f"built {self.image} ({self.image_id[:19]})"
        return f"{self.image} is up to date: same inputs, nothing to build"


def image_tag(profile: Profile, inputs_hash: str) -> str:
    return f"deploytool/{profile.image.recipe}:{profile.name}-{inputs_hash[:12]}"


def resolve_base(engine: Engine, base: str) -> tuple[str, str]:
    """The base image's id, and the reference to build FROM. A base given by digest is used as
    is; a tag is pinned to the id it has now, so the build cannot drift under a moving tag."""
    image = engine.image(base)
    if image is None:
        raise BuildError(
            f"base image {base!r} is not on this engine",
            hint="pull it (`docker pull`), or for the sim recipe run scripts/make-base-image.sh (make base-image)",
        )
    return image.id, (base if "@sha256:" in base else image.id)


def plan_build(profile: Profile, engine: Engine, *, wheelhouse: Path | None = None,
               work_dir: Path | None = None) -> BuildPlan:
    recipe = load_recipe(profile.image.recipe)
    recipe.check(profile)
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise UsageError(f"--wheelhouse {wheelhouse} is not a folder")
    base_id, base_ref = resolve_base(engine, profile.image.base)
    context = Path(tempfile.mkdtemp(prefix=f"build-{profile.name}-", dir=work_dir or cache_dir("build")))
    source = recipe_dir(profile.image.recipe)
    for item in source.iterdir():
        if item.name != "Dockerfile.j2" and not item.name.startswith("."):
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, context / item.name)
    try:
        inputs = recipe.prepare(profile, context_dir=context, wheelhouse=wheelhouse)
    except BaseException:
        shutil.rmtree(context, ignore_errors=True)
        raise

    fingerprint = {**inputs.fingerprint, "deploytool": __version__, "recipe": profile.image.recipe}
    template = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True).from_string(
        (source / "Dockerfile.j2").read_text()
    )
    dockerfile = template.render(profile=profile, base_ref=base_ref, **inputs.template_vars)
    (context / "Dockerfile").write_text(dockerfile)

    digest = hashlib.sha256()
    for part in (
        json.dumps(profile.image.model_dump(mode="json"), sort_keys=True),
        base_id,
        json.dumps(inputs.extra_hash_inputs, sort_keys=True),
        json.dumps(fingerprint, sort_keys=True),
    ):
        digest.update(part.encode() + b"\0")
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(context)).encode() + b"\0")
        digest.update(_file_digest(path) + b"\0")
    inputs_hash = digest.hexdigest()
    tag = image_tag(profile, inputs_hash)

    image_labels = {
        "org.opencontainers.image.title": f"deploytool {profile.image.recipe} runtime for {profile.name}",
        "org.opencontainers.image.version": inputs_hash[:12],
        "org.opencontainers.image.base.name": profile.image.base,
        "org.opencontainers.image.base.digest": base_id,
        "org.opencontainers.image.vendor": "deploytool",
        labels.IMAGE_RECIPE: profile.image.recipe,
        labels.IMAGE_PROFILE: profile.name,
        labels.IMAGE_INPUTS_HASH: inputs_hash,
        labels.IMAGE_FINGERPRINT: json.dumps(fingerprint, sort_keys=True),
    }
    # The classic builder runs one LABEL step per label after the Dockerfile's own steps.
    steps = sum(1 for line in dockerfile.splitlines() if re.match(r"^\s*[A-Z]+\s", line)) + len(image_labels)
    return BuildPlan(profile=profile.name, recipe=profile.image.recipe, context_dir=context,
                     dockerfile=dockerfile, tag=tag, inputs_hash=inputs_hash, base_ref=base_ref,
                     base_id=base_id, labels=image_labels, fingerprint=fingerprint, steps=steps)


def build(profile: Profile, *, engine: Engine | None = None, wheelhouse: Path | None = None,
          progress: ProgressFn | None = None, no_cache: bool = False) -> BuildResult:
    engine = engine or Engine()
    plan = plan_build(profile, engine, wheelhouse=wheelhouse)
    try:
        existing = engine.image(plan.tag)
        if existing is not None:
            return BuildResult(image=plan.tag, image_id=existing.id, built=False,
                               inputs_hash=plan.inputs_hash, labels=dict(existing.labels or {}))
        image_id, tail = _run_build(engine, plan, progress, no_cache)
    finally:
        shutil.rmtree(plan.context_dir, ignore_errors=True)
    journal("build", profile=profile.name, image=plan.tag, image_id=image_id, inputs_hash=plan.inputs_hash)
    return BuildResult(image=plan.tag, image_id=image_id, built=True, inputs_hash=plan.inputs_hash,
                       labels=plan.labels, log_tail=tail)


def _run_build(engine: Engine, plan: BuildPlan, progress: ProgressFn | None, no_cache: bool) -> tuple[str, list[str]]:
    log: list[str] = []
    step, step_line = 0, ""
    image_id = None
    stream = engine.client.api.build(path=str(plan.context_dir), tag=plan.tag, labels=plan.labels,
                                     decode=True, rm=True, forcerm=True, nocache=no_cache, pull=False)
    try:
        for event in _events(stream):
            if "error" in event:
                detail = (event.get("errorDetail") or {}).get("message") or event["error"]
                raise BuildError(
                    f"build of {plan.tag} failed at step {step}/{plan.steps}: {step_line.strip()}\n"
                    f"  {detail.strip()}\n  last lines of output:\n" + "\n".join("    " + x for x in log[-15:])
                )
            if "aux" in event and "ID" in event["aux"]:
                image_id = event["aux"]["ID"]
            text = event.get("stream", "")
            for line in text.splitlines():
                if not line.strip():
                    continue
                match = re.match(r"^Step (\d+)/(\d+) : (.*)", line)
                if match:
                    step, step_line = int(match.group(1)), match.group(3)
                log.append(line)
                if progress:
                    progress(step, plan.steps, line)
    except docker.errors.APIError as exc:
        raise BuildError(f"the engine refused the build of {plan.tag}: {exc.explanation or exc}") from None
    if image_id is None:
        image = engine.image(plan.tag)
        if image is None:
            raise BuildError(f"build of {plan.tag} ended without an image:\n" + "\n".join(log[-15:]))
        image_id = image.id
    return image_id, log[-15:]


def _events(stream: Iterator[dict]) -> Iterator[dict]:
    yield from stream


def _file_digest(path: Path) -> bytes:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.digest()


def link_or_copy(source: Path, target: Path) -> None:
    """Hard-link when possible: a wheelhouse can be hundreds of MB."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
