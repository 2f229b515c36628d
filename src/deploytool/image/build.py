"""`deploytool build`: a pinned image from a profile's recipe.

plan_build() is pure: from the profile and the recipe's declared inputs (the recipe folder,
the files and texts the recipe declares, the base reference, the versions, the patches) it
renders the Dockerfile and derives the tag from a hash of them all, without an engine and
without writing or downloading anything, so `render` and `up --dry-run` can name the image
on a machine that has none. build() resolves the base on the engine, materialises the
context and builds through Engine. The same inputs give the same tag, so a second build
finds its image and does nothing.

A base given by digest (`...@sha256:`) pins the toolchain; a base given by tag only can move,
so its tag ends in `-base-by-tag` and the build records the digest it resolved to in the
image's labels (`org.opencontainers.image.base.digest`); a tag that has moved since is
rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from .. import __version__
from ..errors import BuildError, FieldSentenceError, UsageError
from ..host import labels
from ..host.engine import Engine
from ..profiles import Profile
from ..release.state import build_lock, cache_dir, journal
from .recipes import RecipeInputs, load_recipe, materialise, recipe_dir
from .wheelhouse import file_sha256

ProgressFn = Callable[[int, int, str], None]  # (step, steps, line)
BASE_BY_TAG = "base-by-tag"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"


@dataclass
class BuildPlan:
    profile: str
    recipe: str
    dockerfile: str
    tag: str
    inputs_hash: str
    base_ref: str
    base_pinned: bool  # by digest; else by tag only, resolved when the image is built
    labels: dict[str, str]  # without the base digest, which only the engine knows
    fingerprint: dict[str, str]
    steps: int
    inputs: RecipeInputs = field(repr=False, default_factory=RecipeInputs)


@dataclass
class BuildResult:
    image: str  # the tag, deploytool/<recipe>:<profile>-<hash12>[-base-by-tag]
    image_id: str
    built: bool  # False when an image with the same inputs already existed
    inputs_hash: str
    labels: dict[str, str] = field(default_factory=dict)
    log_tail: list[str] = field(default_factory=list)
    why: str = ""  # why it was (re)built

    @property
    def message(self) -> str:
        if self.built:
            return f"built {self.image} ({self.image_id[:19]}){': ' + self.why if self.why else ''}"
        return f"{self.image} is up to date: same inputs, nothing to build"


def image_tag(profile: Profile, inputs_hash: str) -> str:
    pinned = "@sha256:" in profile.image.base
    return f"deploytool/{profile.image.recipe}:{profile.name}-{inputs_hash[:12]}" + (
        "" if pinned else f"-{BASE_BY_TAG}"
    )


def dockerfile_quote(value: object) -> str:
    """A value as one double-quoted Dockerfile word: `\\`, `"` and `$` (which Docker would
    substitute) escaped. The profile's rules keep newlines out, so it stays on its line."""
    text = str(value)
    if any(c in text for c in "\n\r\0"):
        raise UsageError(f"a Dockerfile value holds a line break or NUL: {text[:40]!r}")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def dockerfile_environment() -> jinja2.Environment:
    """The one Jinja environment Dockerfile templates render in (its quoting filter included),
    so every renderer of a recipe's template reads it the same way."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)  # nosec B701: a Dockerfile, not HTML
    env.filters["dockerfile_quote"] = dockerfile_quote
    return env


def plan_build(profile: Profile, *, wheelhouse: Path | None = None) -> BuildPlan:
    """The image a build would make, from declared inputs only (no engine, no writes)."""
    recipe = load_recipe(profile.image.recipe)
    recipe.check(profile)
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise FieldSentenceError("wheelhouse", "is not a folder", value=str(wheelhouse))
    inputs: RecipeInputs = recipe.declare(profile, wheelhouse=wheelhouse)
    source = recipe_dir(profile.image.recipe)
    base_ref = profile.image.base
    fingerprint = {**inputs.fingerprint, "deploytool": __version__, "recipe": profile.image.recipe}
    template = dockerfile_environment().from_string((source / "Dockerfile.j2").read_text())
    dockerfile = template.render(profile=profile, base_ref=base_ref, **inputs.template_vars)

    digest = hashlib.sha256()
    for part in (
        # source and wheels name places on this host: the recipe declares what they hold
        # (a commit, a tree's digest, sha256s) in its inputs, so moving a checkout rebuilds nothing.
        json.dumps(profile.image.model_dump(mode="json", exclude={"source", "wheels"}), sort_keys=True),
        base_ref,
        json.dumps(inputs.extra_hash_inputs, sort_keys=True),
        json.dumps(fingerprint, sort_keys=True),
        dockerfile,
    ):
        digest.update(part.encode() + b"\0")
    context: dict[str, Path | str] = {
        item.name: item
        for item in source.iterdir()
        if item.name != "Dockerfile.j2" and not item.name.startswith(".")
    }
    context.update(inputs.files)
    for name, item in sorted(context.items()):
        for relative, data in _contents(name, item):
            digest.update(relative.encode() + b"\0" + data + b"\0")
    inputs_hash = digest.hexdigest()
    tag = image_tag(profile, inputs_hash)

    image_labels = {
        "org.opencontainers.image.title": f"deploytool {profile.image.recipe} runtime for {profile.name}",
        "org.opencontainers.image.version": inputs_hash[:12],
        "org.opencontainers.image.base.name": base_ref,
        "org.opencontainers.image.vendor": "deploytool",
        labels.IMAGE_RECIPE: profile.image.recipe,
        labels.IMAGE_PROFILE: profile.name,
        labels.IMAGE_INPUTS_HASH: inputs_hash,
        labels.IMAGE_FINGERPRINT: json.dumps(fingerprint, sort_keys=True),
        **inputs.labels,
    }
    # The classic builder runs one LABEL step per label after the Dockerfile's own steps.
    steps = (
        sum(1 for line in dockerfile.splitlines() if re.match(r"^\s*[A-Z]+\s", line)) + len(image_labels) + 1
    )
    return BuildPlan(
        profile=profile.name,
        recipe=profile.image.recipe,
        dockerfile=dockerfile,
        tag=tag,
        inputs_hash=inputs_hash,
        base_ref=base_ref,
        base_pinned="@sha256:" in base_ref,
        labels=image_labels,
        fingerprint=fingerprint,
        steps=steps,
        inputs=inputs,
    )


def _contents(name: str, item: Path | str) -> list[tuple[str, bytes]]:
    """(path in the context, digest) of each file an input puts there, read where it lies."""
    if isinstance(item, str):
        return [(name, hashlib.sha256(item.encode()).digest())]
    if item.is_file():
        return [(name, _file_digest(item))]
    out = []
    for path in sorted(p for p in item.rglob("*") if p.is_file()):
        relative = path.relative_to(item)
        if "__pycache__" in relative.parts or path.suffix == ".pyc":  # what materialise leaves out
            continue
        out.append((f"{name}/{relative}", _file_digest(path)))
    return out


def stale_reason(plan: BuildPlan, existing_labels: dict[str, str] | None, base_id: str | None) -> str | None:
    """Why the image must be built: None when the engine's image with this tag is current.
    A base pinned by tag that now resolves elsewhere makes the same tag stale; so does a label
    that says otherwise than this deploytool writes for the same inputs (labels are not hashed:
    an image built before kept, say, a host path a label no longer holds)."""
    if existing_labels is None:
        return "no image with these inputs yet"
    if not plan.base_pinned and base_id and existing_labels.get(BASE_DIGEST_LABEL) not in (None, base_id):
        return f"base {plan.base_ref} has moved since the last build (now {base_id[:19]})"
    differ = sorted(k for k, v in plan.labels.items() if k in existing_labels and existing_labels[k] != v)
    if differ:
        return f"its label(s) {', '.join(differ)} are not what this deploytool writes for these inputs"
    return None


def resolve_base(engine: Engine, base: str) -> str:
    """The base image's id on this engine; the build needs it there (no registry is pulled)."""
    image = engine.image(base)
    if image is None:
        raise BuildError(
            f"base image {base!r} is not on this engine",
            hint="pull it (`docker pull`), or for the sim recipe run scripts/make-base-image.sh (make base-image)",
        )
    return image.id


def build(
    profile: Profile,
    *,
    engine: Engine | None = None,
    wheelhouse: Path | None = None,
    progress: ProgressFn | None = None,
    no_cache: bool = False,
    on_start: Callable[[str], None] | None = None,
) -> BuildResult:
    """`on_start(why)` is called once it is known that an image will be built (and not when
    the one on the engine is up to date), so a caller says what a build costs only when it does."""
    engine = engine or Engine()
    plan = plan_build(profile, wheelhouse=wheelhouse)
    base_id = resolve_base(engine, plan.base_ref)
    with build_lock(plan.tag):
        existing = engine.image(plan.tag)
        why = stale_reason(plan, dict(existing.labels or {}) if existing is not None else None, base_id)
        if why is None:
            assert existing is not None  # stale_reason's reason for no image: "no image" wants a build
            return BuildResult(
                image=plan.tag,
                image_id=existing.id,
                built=False,
                inputs_hash=plan.inputs_hash,
                labels=dict(existing.labels or {}),
            )
        if on_start is not None:
            on_start(why)
        image_labels = {**plan.labels, BASE_DIGEST_LABEL: base_id}
        context = Path(tempfile.mkdtemp(prefix=f"build-{profile.name}-", dir=cache_dir("build")))
        try:
            source = recipe_dir(profile.image.recipe)
            for item in source.iterdir():
                if item.name != "Dockerfile.j2" and not item.name.startswith("."):
                    (shutil.copytree if item.is_dir() else shutil.copy2)(item, context / item.name)
            materialise(plan.inputs, context)
            (context / "Dockerfile").write_text(plan.dockerfile)
            image_id, tail = _run_build(engine, plan, context, image_labels, progress, no_cache)
        finally:
            shutil.rmtree(context, ignore_errors=True)
        journal(
            "build",
            profile=profile.name,
            image=plan.tag,
            image_id=image_id,
            inputs_hash=plan.inputs_hash,
            base=plan.base_ref,
            base_digest=base_id,
            **plan.inputs.journal,
        )
        return BuildResult(
            image=plan.tag,
            image_id=image_id,
            built=True,
            inputs_hash=plan.inputs_hash,
            labels=image_labels,
            log_tail=tail,
            why=why,
        )


def _run_build(
    engine: Engine,
    plan: BuildPlan,
    context: Path,
    image_labels: dict[str, str],
    progress: ProgressFn | None,
    no_cache: bool,
) -> tuple[str, list[str]]:
    log: list[str] = []
    step, step_line = 0, ""
    image_id = None
    for event in engine.build_events(context, tag=plan.tag, labels=image_labels, no_cache=no_cache):
        if "error" in event:
            detail = (event.get("errorDetail") or {}).get("message") or event["error"]
            raise BuildError(
                f"build of {plan.tag} failed at step {step}/{plan.steps}: {step_line.strip()}\n"
                f"  {detail.strip()}\n  last lines of output:\n" + "\n".join("    " + x for x in log[-15:])
            )
        if "aux" in event and "ID" in event["aux"]:
            image_id = event["aux"]["ID"]
        for line in event.get("stream", "").splitlines():
            if not line.strip():
                continue
            match = re.match(r"^Step (\d+)/(\d+) : (.*)", line)
            if match:
                step, step_line = int(match.group(1)), match.group(3)
            log.append(line)
            if progress:
                progress(step, plan.steps, line)
    if image_id is None:
        image = engine.image(plan.tag)
        if image is None:
            raise BuildError(f"build of {plan.tag} ended without an image:\n" + "\n".join(log[-15:]))
        image_id = image.id
    return image_id, log[-15:]


def _file_digest(path: Path) -> bytes:
    return bytes.fromhex(file_sha256(path))


def expected_size(profile: Profile) -> str:
    """What a build of this profile's image costs, as measured on this project's machines, said
    before it starts: the image's size, what is downloaded, how long, the disk it needs."""
    image = profile.image
    if image.recipe == "sim":
        return (
            "about 260 MB (the deploytool/sim images on this project's engine: 259 MB, `docker image ls`), on "
            f"{image.base} (195 MB); its few Python wheels come from the package index; about a minute"
        )
    if image.cuda is None:
        return (
            "a CPU image of the pinned SGLang: about 560 MB of wheels (torch CPU and triton most of it), "
            "an image near 1.5 GB; the CPU build of torch must come from the index DEPLOYTOOL_TORCH_INDEX_URL "
            "names, or pip may fetch the several-GB CUDA build"
        )
    measured = (
        "measured for rtx5090-qwen3.6-35b-a3b-nvfp4-wheels: a 12.4 GB image, 4.8 GB of wheels (211 files; "
        "1.75 GB of them from the index when the wheelhouse already has torch and the nvidia wheels), "
        "13.5 min the first time on 2 busy cores, about 35 GB of free disk during the build "
        "(docs/measured/gpu-image-wheels.md)"
    )
    if image.base_source == "wheels":
        return measured
    return (
        f"the same 4.3 GB of SGLang wheels on the {image.base} base image (pulled from its registry, several GB; "
        f"not measured here, where no image registry is reachable); for comparison, {measured}"
    )
