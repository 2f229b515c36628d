"""`deploytool profiles check NAME`: a profile's launch flags, checked by the argument parser of
its pinned sglang before a five-minute start-up finds the typo.

Where the parser runs:
  * inside the profile's built image when the engine has one (label
    dev.deploytool.build-profile=NAME): the exact sglang that will serve, patches included;
  * else in a deploytool-managed virtual environment under the cache folder, where the pinned
    sglang wheel is installed without its dependencies, next to the few light packages its
    parser imports (images/sglang/parser-requirements.txt) and a CPU build of torch. It is
    made once per sglang release and Python (about a minute, then ~2 s a check).

deploytool.flagprobe runs there and answers per flag: ok, unknown (with close names),
invalid_choice, wrong_type, overridden (sglang stores or resolves another value) or
redundant (sglang's default). Resolution of derived values needs the model's config where
the parser runs; without it the report says why it was skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import labels
from .errors import DeploytoolError, UsageError
from .patches import sglang_wheel
from .profiles import Profile, args_to_argv
from .resources import package_dir, resource
from .state import cache_dir
from .versions import load_matrix

FAILING = ("unknown", "invalid_choice", "wrong_type", "wrong_arity", "rejected")
_MARKER = "---deploytool-flagprobe---"


@dataclass
class FlagFinding:
    flag: str
    given: Any
    status: str  # ok | unknown | invalid_choice | wrong_type | wrong_arity | rejected | overridden | redundant
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

    @property
    def ok(self) -> bool:
        return self.parser_error is None and not any(f.failed for f in self.findings)

    @property
    def failures(self) -> list[FlagFinding]:
        return [f for f in self.findings if f.failed]


def flag_groups(profile: Profile) -> list[list[str]]:
    """server.args as [flag, value...] groups, in the order the launch command has them."""
    return [args_to_argv({key: value}) for key, value in profile.server.args.items() if args_to_argv({key: value})]


def parser_requirements(torch_version: str) -> list[str]:
    lines = (resource("images", "sglang", "parser-requirements.txt")).read_text().splitlines()
    pins = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return [f"torch=={torch_version}", *pins]


def parser_venv(sglang_version: str) -> Path:
    """deploytool's own environment with sglang's parser: made once, reused."""
    matrix = load_matrix()
    row = matrix.sglang_row(sglang_version)
    if row is None:
        raise UsageError(f"sglang {sglang_version} is not in the version matrix ({matrix.source})")
    if not row.cpu_torch:
        raise UsageError(f"the version matrix names no CPU torch for sglang {sglang_version} (cpu_validation.torch)")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    root = cache_dir("flagcheck", f"sglang-{sglang_version}-py{python}")
    bin_python = root / "venv" / "bin" / "python"
    requirements = parser_requirements(row.cpu_torch[0])
    stamp = root / "complete.json"
    if bin_python.exists() and stamp.exists() and json.loads(stamp.read_text()).get("requirements") == requirements:
        return bin_python
    wheel = sglang_wheel(sglang_version, python)
    venv.EnvBuilder(with_pip=True, clear=True).create(root / "venv")
    for step in (["--no-deps", str(wheel)], requirements):
        proc = subprocess.run([str(bin_python), "-m", "pip", "install", "--quiet", *step],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise DeploytoolError(f"could not make the sglang {sglang_version} parser environment in {root}:\n"
                                  + "\n".join("    " + x for x in proc.stderr.strip().splitlines()[-10:]),
                                  hint="it needs a package index once (or pip's find-links); a built image avoids it")
    stamp.write_text(json.dumps({"requirements": requirements, "wheel": wheel.name}))
    return bin_python


def built_image(profile: Profile) -> str | None:
    """The newest image built for this profile, when an engine is reachable and has one."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        found = client.images.list(filters={"label": f"{labels.IMAGE_PROFILE}={profile.name}"})
    except Exception:  # no engine: fall back to the venv, say where the check ran
        return None
    if not found:
        return None
    newest = max(found, key=lambda image: image.attrs.get("Created", ""))
    return (newest.tags or [newest.id])[0]


def check(profile: Profile, *, image: str | None = None, use_image: bool = True, resolve: bool = False,
          timeout: float = 300) -> FlagCheck:
    if profile.image.recipe != "sglang":
        raise UsageError(f"profile {profile.name!r} uses recipe {profile.image.recipe!r}: "
                         "`profiles check` validates sglang launch flags only")
    version = profile.image.runtime_version
    if not version:
        raise UsageError(f"profile {profile.name!r}: image.runtime_version (the sglang release) is not set")
    request = {"groups": flag_groups(profile), "resolve": resolve,
               "model_path": str(profile.server.args.get("model-path") or profile.model.path)}
    probe = (package_dir() / "flagprobe.py").read_text()
    image = image or (built_image(profile) if use_image else None)
    if image:
        where = f"image {image}"
        cmd = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", probe,
               json.dumps(request)]
    else:
        python = parser_venv(version)
        where = f"venv {python.parent.parent}"
        cmd = [str(python), "-c", probe, json.dumps(request)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise DeploytoolError(f"sglang's parser did not answer within {timeout:g} s ({where})") from None
    answer = _answer(proc.stdout)
    if answer is None:
        raise DeploytoolError(f"sglang {version}'s parser could not run ({where}, exit {proc.returncode}):\n"
                              + "\n".join("    " + x for x in (proc.stderr or proc.stdout).strip().splitlines()[-12:]))
    result = FlagCheck(profile=profile.name, sglang_version=version, where=where,
                       parser_error=answer.get("parser_error"), derived=answer.get("derived") or {})
    for raw in answer["findings"]:
        result.findings.append(FlagFinding(flag=raw["flag"], given=raw.get("given"), status=raw["status"],
                                           message=raw.get("message", ""), stored=raw.get("stored"),
                                           suggestions=raw.get("suggestions") or []))
    if resolve and not answer.get("resolved"):
        result.resolve_note = f"derived values not resolved here: {answer.get('resolve_error') or 'skipped'}"
    elif not resolve:
        result.resolve_note = "derived values not resolved (needs the model's config and the GPU: run with --resolve inside the image on the target host)"
    return result


def _answer(stdout: str) -> dict[str, Any] | None:
    lines = stdout.splitlines()
    if _MARKER not in lines:
        return None
    try:
        return json.loads(lines[lines.index(_MARKER) + 1])
    except (IndexError, json.JSONDecodeError):
        return None

