"""`deploytool profiles check NAME`: a profile's launch flags, checked by the argument parser of
its pinned sglang before a five-minute start-up finds the typo.

Where the parser runs:
  * inside the profile's built image when the engine has one (label
    dev.deploytool.build-profile=NAME) whose toolchain label names the profile's sglang
    (image.runtime_version) and its source (a fork's commit, a tree's digest, a series of the
    profile's own): the exact sglang that will serve, patches included;
  * else in a deploytool-managed virtual environment under the cache folder (parser_env.py),
    where the pinned sglang wheel is installed without its dependencies, next to the few light
    packages its parser imports (images/sglang/parser-requirements.txt) and torch, from the
    index that DEPLOYTOOL_TORCH_INDEX_URL names (point it at a CPU torch index), else from pip's own
    configuration, which on x86_64 may give the CUDA build (several GB). It is made once per
    sglang release and Python (about a minute, then ~2 s a check). A fork's package (git or
    path source, unpacked once per commit or tree digest) or the release with the profile's
    own series applied (image.source.series) comes first on the path, so their flags are the
    ones read.

deploytool.image.in_image.flagprobe runs there and answers per flag: ok, unknown (with close names),
invalid_choice, wrong_type, overridden (sglang stores or resolves another value) or
redundant (sglang's default). Resolution of derived values needs the model's config where
the parser runs; without it the report says why it was skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CouldNotRun, DeploytoolError, UsageError
from ..host import labels
from ..host.engine import Engine
from ..profiles import Profile, args_to_argv
from ..resources import package_dir
from . import runtime_source
from .parser_env import parser_venv

FAILING = ("unknown", "invalid_choice", "wrong_type", "wrong_arity", "rejected")
_MARKER = "---deploytool-flagprobe---"


@dataclass
class FlagFinding:
    flag: str
    given: Any
    status: (
        str  # ok | unknown | invalid_choice | wrong_type | wrong_arity | rejected | overridden | redundant
    )
    message: str = ""
    stored: Any = None
    suggestions: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status in FAILING


@dataclass
class FlagCheck:
    profile: str
    sglang_version: str
    where: str  # "image deploytool/sglang:..." or "venv /path"
    findings: list[FlagFinding] = field(default_factory=list)
    parser_error: str | None = None  # the whole command line refused by prepare_server_args
    derived: dict[str, Any] = field(default_factory=dict)
    resolve_note: str | None = None
    probe_error: str | None = None  # the check itself failed on this profile: nothing is known of its flags
    # SGLang's own start-up checks with the checkpoint's config (flagprobe.startup): refused/where,
    # what it logged, or a note saying why they could not run there; None when no checkpoint was given
    startup: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return (
            self.parser_error is None
            and self.probe_error is None
            and not any(f.failed for f in self.findings)
            and not (self.startup or {}).get("refused")
        )

    @property
    def failures(self) -> list[FlagFinding]:
        return [f for f in self.findings if f.failed]


def flag_groups(profile: Profile) -> list[list[str]]:
    """server.args as [flag, value...] groups, in the order the launch command has them."""
    # launch_args(): server.args plus the flags the model source implies (--model-path).
    return [
        args_to_argv({key: value})
        for key, value in profile.launch_args().items()
        if args_to_argv({key: value})
    ]


def unset_flags(profile: Profile) -> list[list[Any]]:
    """[flag, value] of server.args whose value (false or null) keeps them off the command line:
    their names are still checked."""
    return [
        [key if key.startswith("-") else f"--{key}", value]
        for key, value in profile.server.args.items()
        if value is False or value is None
    ]


def built_image(profile: Profile, *, wheelhouse: Path | None = None) -> str | None:
    """The image built for this profile with its pinned sglang (see find_built_image), when an
    engine is reachable and has one."""
    return find_built_image(profile, wheelhouse=wheelhouse)[0]


def find_built_image(profile: Profile, *, wheelhouse: Path | None = None) -> tuple[str | None, str | None]:
    """(image, note): the image the parser runs in, or None, and a note saying why it is not the
    exact one (or why there is none; None when the engine simply has no image for the profile).

    First the image with the tag the profile's current declared inputs give
    (build.plan_build, `wheelhouse` as it was given to `build`): exactly what `build` made
    of this profile as it is now. A shared engine keeps images of other checkouts and earlier
    runs, and a build that found its tag keeps the old creation time, so "the newest image
    labelled for the profile" may be another one. Only when that tag is not on the engine is
    the newest labelled image used, and the note names it. Either way an image counts only when
    its toolchain label's `sglang` is the profile's image.runtime_version: after a bump without
    a rebuild it holds another sglang's parser."""
    try:
        import docker

        # No engine refuses at once; a busy one (builds beside it) can take many seconds to
        # list its images, and a short timeout would silently check another parser than the image's.
        client = docker.from_env(timeout=60)
        found = client.images.list(filters={"label": f"{labels.IMAGE_PROFILE}={profile.name}"})
    except Exception as exc:
        return None, f"no Docker engine answered ({type(exc).__name__}: {str(exc)[:160]})"
    if not found:
        return None, None
    want = profile.image.runtime_version
    if want is None:  # no pinned sglang: no image can be said to hold it
        return None, why_not_checkable(profile)
    want_source = _source_identity(profile)
    fitting, other = [], set()
    for image in found:
        try:
            toolchain = json.loads((image.labels or {}).get(labels.IMAGE_FINGERPRINT) or "{}")
            have, have_source = toolchain.get("sglang"), toolchain.get("sglang_source", "wheel")
        except (json.JSONDecodeError, AttributeError):
            have, have_source = None, None
        if have == want and have_source == want_source:
            fitting.append(image)
        else:
            other.add(
                str(have or "unknown") + ("" if have_source in ("wheel", None) else f" ({have_source})")
            )
    if not fitting:
        wanted = want + ("" if want_source == "wheel" else f" ({want_source})")
        return None, (
            f"the image(s) built for {profile.name} carry sglang {', '.join(sorted(other))}, "
            f"the profile pins {wanted}: rebuild with `deploytool build --profile {profile.name}`"
        )
    from .build import plan_build

    try:
        tag = plan_build(profile, wheelhouse=wheelhouse).tag
    except DeploytoolError as exc:
        tag, why_not = None, f"the profile's image tag cannot be computed ({exc.message})"
    else:
        exact = next((image for image in fitting if tag in (image.tags or [])), None)
        if exact is not None:
            return tag, None
        why_not = f"{tag}, what the profile's current inputs give, is not on this engine"
    newest = max(fitting, key=lambda image: image.attrs.get("Created", ""))
    name = (newest.tags or [str(newest.id)])[0]
    return name, (
        f"the newest image labelled for {profile.name}, built {newest.attrs.get('Created', '?')[:19]}: "
        f"{why_not}; `deploytool build --profile {profile.name}` to check in exactly that one"
    )


def check(
    profile: Profile,
    *,
    image: str | None = None,
    use_image: bool = True,
    resolve: bool = False,
    timeout: float = 300,
    wheelhouse: Path | None = None,
    checkpoint: Path | None = None,
) -> FlagCheck:
    return check_many(
        [profile],
        image=image,
        use_image=use_image,
        resolve=resolve,
        timeout=timeout,
        wheelhouse=wheelhouse,
        checkpoint=checkpoint,
    )[0]


def check_many(
    profiles: list[Profile],
    *,
    image: str | None = None,
    use_image: bool = True,
    resolve: bool = False,
    timeout: float = 300,
    wheelhouse: Path | None = None,
    checkpoint: Path | None = None,
) -> list[FlagCheck]:
    """Each profile's check, in order. Profiles whose parser runs in the same place (one image, or
    the parser venv with the same sources first on the path) share one probe process: starting
    it (importing torch and sglang) is most of a check's cost. Not with `resolve`: sglang's
    resolution writes the process's environment, which the next profile would then read."""
    versions = [_checkable(profile) for profile in profiles]
    places = [
        _place(p, version, image=image, use_image=use_image, wheelhouse=wheelhouse)
        for p, version in zip(profiles, versions, strict=True)
    ]
    groups: dict[tuple, list[int]] = {}
    for i, place in enumerate(places):
        groups.setdefault(place.key + ((i,) if resolve else ()), []).append(i)
    results: dict[int, FlagCheck] = {}
    for members in groups.values():
        answers = _probe(
            places[members[0]],
            [_request(profiles[i], resolve, *([checkpoint] if checkpoint else [])) for i in members],
            names=[profiles[i].name for i in members],
            timeout=timeout,
        )
        for i, answer in zip(members, answers, strict=True):
            results[i] = _result(profiles[i], places[i], answer, resolve=resolve)
    return [results[i] for i in range(len(profiles))]


def why_not_checkable(profile: Profile) -> str | None:
    """Why sglang's parser cannot check this profile (`--all` skips it, saying this); None when it can."""
    if profile.image.recipe != "sglang":
        return f"recipe {profile.image.recipe!r}: `profiles check` validates sglang launch flags only"
    if not profile.image.runtime_version:
        return "image.runtime_version (the sglang release) is not set"
    return None


def _checkable(profile: Profile) -> str:
    """The sglang release whose parser checks the profile, or UsageError saying why none can."""
    version = profile.image.runtime_version
    why = why_not_checkable(profile)
    if why or version is None:
        raise UsageError(f"profile {profile.name!r}: {why}")
    return version


@dataclass
class _Place:
    """Where one profile's parser runs: a built image, or the parser venv's Python with the
    sources that come first on its path."""

    version: str
    where: str
    image: str | None = None
    python: Path | None = None
    pythonpath: str | None = None
    shown: str | None = None  # the parser's own version where it is not the release's (a fork's)

    @property
    def key(self) -> tuple:
        return (self.image, str(self.python), self.pythonpath)


def _place(
    profile: Profile, version: str, *, image: str | None, use_image: bool, wheelhouse: Path | None
) -> _Place:
    note = None
    if not image and use_image:
        image, note = find_built_image(profile, wheelhouse=wheelhouse)
    if image:
        return _Place(version, f"image {image}" + (f" ({note})" if note else ""), image=image)
    python = parser_venv(version)
    place = _Place(
        version,
        f"venv {python.parent.parent}" + (f" (no built image: {note})" if note else ""),
        python=python,
    )
    source = runtime_source.resolve(profile)
    if source.is_fork:
        # The release's venv holds what the parser imports; the fork's own package, unpacked
        # once per commit (or tree digest), comes first on the path: its flags are the ones read.
        tree = runtime_source.unpacked(source)
        place.pythonpath = str(tree)
        place.where += f" with the fork's sources {tree} ({source.describe()})"
        place.shown = source.version
    elif source.series:
        # A series of the profile's own may add or change flags: the release with that
        # series applied comes first on the path, as in the image.
        from .patches import patched_release

        tree = patched_release(profile, source)
        place.pythonpath = str(tree)
        place.where += f" with the patched sources {tree} ({source.describe()})"
    return place


# what SGLang's model configuration reads from a checkpoint folder (never a weight)
CONFIG_FILES = ("config.json", "hf_quant_config.json", "generation_config.json")


def _request(profile: Profile, resolve: bool, checkpoint: Path | None = None) -> dict[str, Any]:
    request = {
        "groups": flag_groups(profile),
        "names_only": unset_flags(profile),
        "resolve": resolve,
        "model_path": str(profile.launch_args().get("model-path") or profile.model.path),
    }
    if checkpoint is not None:
        # the files travel in the request (the image has no mount of this folder); only SGLang's
        # own switches of the profile's environment, never the rest of it (it may hold secrets)
        request["checkpoint_files"] = {
            name: (checkpoint / name).read_text() for name in CONFIG_FILES if (checkpoint / name).is_file()
        }
        request["env"] = {k: str(v) for k, v in profile.server.env.items() if k.startswith("SGLANG_")}
    return request


def _probe(
    place: _Place, requests: list[dict[str, Any]], *, names: list[str], timeout: float
) -> list[dict[str, Any]]:
    """One probe process for all the requests: an answer each, in order. `timeout` bounds the
    start-up and the first answer; each further profile adds a few seconds."""
    probe = (package_dir() / "image" / "in_image" / "flagprobe.py").read_text()
    payload = json.dumps(requests)
    timeout += 10 * (len(requests) - 1)
    if place.image:
        try:
            proc = Engine().run_argv(place.image, "python3", ["-c", probe, payload], timeout=timeout)
        except DeploytoolError as exc:
            raise CouldNotRun(f"sglang's parser could not run ({place.where}): {exc.message}") from None
    else:
        env = {**os.environ, "PYTHONPATH": place.pythonpath} if place.pythonpath else None
        try:
            proc = subprocess.run(
                [str(place.python), "-c", probe, payload],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
            )
        except subprocess.TimeoutExpired:
            raise CouldNotRun(
                f"sglang's parser did not answer within {timeout:g} s ({place.where}; "
                f"checking {', '.join(names)})"
            ) from None
    answers = marked_answers(proc.stdout, _MARKER)
    if len(answers) != len(requests):
        stuck = f"; it stopped at {names[len(answers)]}" if len(answers) < len(names) else ""
        raise CouldNotRun(
            f"sglang {place.version}'s parser could not run ({place.where}, exit {proc.returncode}; "
            f"{len(answers)} of {len(requests)} profiles answered{stuck}):\n"
            + "\n".join("    " + x for x in (proc.stderr or proc.stdout).strip().splitlines()[-12:])
        )
    return answers


def _result(profile: Profile, place: _Place, answer: dict[str, Any], *, resolve: bool) -> FlagCheck:
    installed = answer.get("sglang_version") if place.image else None
    result = FlagCheck(
        profile=profile.name,
        sglang_version=place.shown or installed or place.version,
        where=place.where,
        parser_error=answer.get("parser_error"),
        derived=answer.get("derived") or {},
        probe_error=answer.get("probe_error"),
        startup=answer.get("startup"),
    )
    for raw in answer["findings"]:
        result.findings.append(
            FlagFinding(
                flag=raw["flag"],
                given=raw.get("given"),
                status=raw["status"],
                message=raw.get("message", ""),
                stored=raw.get("stored"),
                suggestions=raw.get("suggestions") or [],
            )
        )
    if resolve and not answer.get("resolved"):
        result.resolve_note = f"derived values not resolved here: {answer.get('resolve_error') or 'skipped'}"
    elif not resolve:
        result.resolve_note = "derived values not resolved (needs the model's config and the GPU: run with --resolve inside the image on the target host)"
    return result


def marked_answer(stdout: str, marker: str) -> dict[str, Any] | None:
    """The JSON line after `marker` in what a probe printed inside an image or venv (anything
    sglang itself printed before it is skipped); None when the probe never got that far."""
    answers = marked_answers(stdout, marker)
    return answers[0] if answers else None


def marked_answers(stdout: str, marker: str) -> list[dict[str, Any]]:
    """Every answer a probe printed, each the JSON line after a `marker` line, in order; a
    marker whose line is not JSON ends the list (the probe died while answering)."""
    lines = stdout.splitlines()
    answers = []
    for i, line in enumerate(lines):
        if line != marker:
            continue
        try:
            answers.append(json.loads(lines[i + 1]))
        except (IndexError, json.JSONDecodeError):
            break
    return answers


def _source_identity(profile: Profile) -> str:
    """What an image's toolchain label must say of its sglang's source to be the profile's:
    "wheel" for the release with its shipped series, else the identity of the fork, the tree or
    the series of the profile's own (image.source.series)."""
    spec = profile.image.source
    if spec.kind == "wheel" and not spec.series:
        return "wheel"
    try:
        return runtime_source.resolve(profile).identity
    except DeploytoolError:
        return "unresolvable"
