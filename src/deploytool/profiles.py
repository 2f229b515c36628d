"""Launch profiles: one YAML file per card-and-model, with `extends:` inheritance.

A profile is validated once, fully resolved, before anything is built or started: an unknown
key, a wrong type, a missing field or a cycle in `extends` is refused with the file, the line,
the field and what was expected.

Merge rule for `extends`: mappings merge key by key (the child wins), everything else (lists,
scalars) is replaced whole, and a child value of `null` deletes the parent's key, so a child
can drop a launch flag it does not want.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ProfileError, UsageError
from .image.source_spec import LocalWheel, RuntimeSource
from .resources import resource
from .release.secrets import ProfileSecrets, SecretRef  # issue 13: secrets are named, never inline
from .yamlio import LocatedDocument, load_yaml

ArgValue = str | int | float | bool | list[str | int | float] | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MatchSpec(_Strict):
    """Which cards a profile is made for."""

    gpu_name: list[str] = Field(default_factory=list)
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    min_memory_gib: float | None = Field(default=None, gt=0)
    gpu_count: int = Field(default=1, ge=1)


class ImageSpec(_Strict):
    """The pinned inputs of the image; every field goes into the image tag's hash."""

    recipe: str
    base: str
    # registry: `base` is an nvidia/cuda image (pulled by digest); wheels: `base` is a plain OS
    # image (deploytool/base:bookworm) and the CUDA toolkit comes from NVIDIA's pinned wheels.
    base_source: Literal["registry", "wheels"] = "registry"
    python: str = "3.11"
    cuda: str | None = None
    torch_version: str | None = None
    runtime_version: str | None = None  # sglang
    kernel_version: str | None = None  # sglang-kernel
    flashinfer_version: str | None = None
    patches: list[str] = Field(default_factory=list)
    build_args: dict[str, str] = Field(default_factory=dict)
    # Where sglang comes from (the pinned wheel, a fork at a commit, a local tree) and wheel
    # files that replace the index's package of the same name: deploytool.image.source_spec.
    source: RuntimeSource = Field(default_factory=RuntimeSource)
    wheels: list[LocalWheel] = Field(default_factory=list)


class ModelSpec(_Strict):
    # Where the weights come from (issue 13, deploytool.release.weights): exactly one of `hub` (a hub
    # repository served from the host's hub cache) and `host_path` (a host folder holding
    # config.json and *.safetensors, mounted read-only at `path`). Simulator profiles may omit both.
    hub: str | None = None
    revision: str | None = None  # hub only: branch, tag or commit (default main)
    offline: bool = True  # hub only: HF_HUB_OFFLINE=1 and a read-only cache; false lets the server download
    host_path: str | None = None  # the checkpoint's host folder
    path: str | None = None  # where host_path appears in the container (default /models/<folder name>)
    served_name: str
    context_length: int = Field(gt=0)
    vision: bool = False
    tools: bool = False
    tokenizer: str | None = None


class ServerSpec(_Strict):
    port: int = Field(ge=1, le=65535)
    command: list[str]
    args: dict[str, ArgValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    shm_size: str = "32g"
    ipc: Literal["host", "private", "shareable"] = "host"
    # SGLang's own compose file: unlimited locked memory for pinned buffers, a large stack.
    # A host that forbids raising a limit (some sandboxes) refuses to start the container,
    # so a profile can set `ulimits: {}`.
    ulimits: dict[str, int] = Field(default_factory=lambda: {"memlock": -1, "stack": 67108864})
    # The server's API key: where it lives on the host, never the key (issue 13, deploytool.release.secrets).
    api_key: SecretRef | None = None

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, value: Any) -> Any:
        # YAML reads `1` and `true` as numbers and booleans; the container sees text.
        if isinstance(value, dict):
            return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}
        return value


class HealthSpec(_Strict):
    path: str = "/health"
    start_period: int = Field(default=900, ge=0)
    start_interval: int = Field(default=2, ge=1)
    interval: int = Field(default=10, ge=1)
    timeout: int = Field(default=25, ge=1)
    retries: int = Field(default=3, ge=1)

    def budget_seconds(self) -> int:
        """How long a start may take before it counts as failed."""
        return self.start_period + self.retries * (self.interval + self.timeout)


class RolloutSpec(_Strict):
    """`deploytool rollout`: the suites the slots after the canary run (they run the image the
    canary qualified, so a shorter set checks that each card serves it)."""

    qualify: list[str] = Field(default_factory=lambda: ["preflight", "contract", "performance"])
    quick_performance: bool = True  # performance in its quick form on the slots after the canary


class WatchSpec(_Strict):
    """`deploytool watch`: when to restart a release whose health probe fails, and when a
    release that keeps failing right after its cut-over is rolled back instead."""

    interval: float = Field(default=10, gt=0)  # seconds between probes of each slot
    failures: int = Field(default=3, ge=1)  # consecutive failed probes before a restart
    backoff: float = Field(default=30, ge=0)  # seconds after a restart before the next; doubles each time
    backoff_max: float = Field(default=600, ge=0)
    max_restarts_per_hour: int = Field(default=6, ge=0)
    crash_loop_window: float = Field(default=900, ge=0)  # seconds after a cut-over; 0: never roll back
    crash_loop_restarts: int = Field(default=3, ge=1)  # restarts within the window that make a crash loop


class Profile(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str = ""
    abstract: bool = False
    match: MatchSpec = Field(default_factory=MatchSpec)
    image: ImageSpec
    model: ModelSpec
    server: ServerSpec
    health: HealthSpec = Field(default_factory=HealthSpec)
    qualify: dict[str, Any] = Field(default_factory=dict)
    bench: dict[str, Any] = Field(default_factory=dict)
    secrets: ProfileSecrets = Field(default_factory=ProfileSecrets)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    watch: WatchSpec = Field(default_factory=WatchSpec)
    # Provenance, filled by the loader, not read from YAML.
    source: str = Field(default="", exclude=True)
    chain: list[str] = Field(default_factory=list, exclude=True)

    @property
    def is_simulator(self) -> bool:
        return self.image.recipe == "sim"

    def launch_args(self) -> dict[str, ArgValue]:
        """The server's flags: those the model source implies (--model-path, --revision), then server.args."""
        from .release.weights import plan_model  # issue 13

        return {**plan_model(self).launch_args(), **self.server.args}

    def launch_argv(self) -> list[str]:
        """The server's command line: command, then each flag of launch_args()."""
        return self.server.command + args_to_argv(self.launch_args())


def args_to_argv(args: dict[str, ArgValue]) -> list[str]:
    """{'tp-size': 8, 'enable-x': True, 'skip': False, 'list': [a, b]} -> argv, SGLang style:
    True is a bare flag, False and None are left out, a list repeats its values after the flag."""
    argv: list[str] = []
    for key, value in args.items():
        flag = key if key.startswith("-") else f"--{key}"
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


@dataclass
class _RawProfile:
    name: str
    doc: LocatedDocument


def search_path(extra_dirs: list[Path] | None = None) -> list[Path]:
    """Built-in profiles first, then DEPLOYTOOL_PROFILES_PATH, then --profiles-dir: a later
    folder's profile of the same name replaces an earlier one's."""
    dirs = [resource("profiles")]
    env = os.environ.get("DEPLOYTOOL_PROFILES_PATH", "")
    dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs += list(extra_dirs or [])
    for d in dirs[1:]:
        if not d.is_dir():
            raise UsageError(f"profiles folder {d} does not exist")
    return dirs


class ProfileStore:
    """Every profile on the search path, resolved on demand."""

    def __init__(self, extra_dirs: list[Path] | None = None):
        self.dirs = search_path(extra_dirs)
        self._raw: dict[str, _RawProfile] = {}
        for d in self.dirs:
            for path in sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")):
                doc = load_yaml(path)
                if not isinstance(doc.data, dict):
                    raise ProfileError(f"{path}:1: a profile must be a mapping of fields, got {type(doc.data).__name__}")
                name = doc.data.get("name")
                if not isinstance(name, str):
                    raise ProfileError(f"{doc.where(('name',))}: field 'name' is missing or not text")
                self._raw[name] = _RawProfile(name=name, doc=doc)

    def names(self, *, include_abstract: bool = False) -> list[str]:
        names = sorted(self._raw)
        if include_abstract:
            return names
        return [n for n in names if not self._raw[n].doc.data.get("abstract", False)]

    def all(self) -> list[Profile]:
        return [self.get(n) for n in self.names()]

    def get(self, name: str) -> Profile:
        if name not in self._raw:
            known = ", ".join(self.names()) or "none"
            raise ProfileError(
                f"unknown profile {name!r}",
                hint=f"known profiles: {known} (searched {', '.join(str(d) for d in self.dirs)})",
            )
        chain = self._chain(name)
        merged: dict[str, Any] = {}
        for raw in reversed(chain):  # base first, the profile itself last
            body = {k: v for k, v in raw.doc.data.items() if k != "extends"}
            merged = deep_merge(merged, body)
        merged["name"] = name
        merged["abstract"] = chain[0].doc.data.get("abstract", False)
        try:
            profile = Profile.model_validate(merged)
        except ValidationError as exc:
            raise ProfileError(_explain(exc, chain)) from None
        _check_semantics(profile, chain)  # issue 13: model source and secrets
        profile.source = str(chain[0].doc.path)
        profile.chain = [r.name for r in chain]
        return profile

    def _chain(self, name: str) -> list[_RawProfile]:
        chain: list[_RawProfile] = []
        seen: list[str] = []
        current: str | None = name
        while current is not None:
            if current in seen:
                cycle = " -> ".join(seen + [current])
                raise ProfileError(f"{self._raw[seen[-1]].doc.where(('extends',))}: 'extends' makes a cycle: {cycle}")
            if current not in self._raw:
                child = self._raw[seen[-1]]
                raise ProfileError(
                    f"{child.doc.where(('extends',))}: 'extends' names unknown profile {current!r}",
                    hint=f"known profiles: {', '.join(sorted(self._raw))}",
                )
            seen.append(current)
            raw = self._raw[current]
            chain.append(raw)
            parent = raw.doc.data.get("extends")
            if parent is not None and not isinstance(parent, str):
                raise ProfileError(f"{raw.doc.where(('extends',))}: 'extends' must be one profile name")
            current = parent
        return chain


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _explain(exc: ValidationError, chain: list[_RawProfile]) -> str:
    """Each pydantic error as 'file:line: field: what was expected', pointing at the file in
    the extends chain that set the field (or the profile itself when none did)."""
    lines = [f"profile {chain[0].name!r} is not valid:"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc)
        owner = next((r for r in chain if loc in r.doc.lines), None)
        if owner is None:
            # A missing field: point at the closest parent mapping in the profile itself.
            owner = next((r for r in chain if loc[:-1] in r.doc.lines), chain[0])
        where = owner.doc.where(loc)
        what = {
            "extra_forbidden": "unknown field (check the spelling; see docs/profiles.md for the schema)",
            "missing": "required field is missing",
        }.get(err["type"], err["msg"])
        got = "" if err["type"] in ("missing",) else f" (got {err.get('input')!r})"
        if err["type"] == "extra_forbidden":
            got = ""
        lines.append(f"  {where}: {field}: {what}{got}")
    return "\n".join(lines)


def _check_semantics(profile: Profile, chain: list[_RawProfile]) -> None:
    """Rules across fields (model source, secrets), reported like schema errors: file:line."""
    from .release import secrets, weights

    problems = weights.profile_problems(profile) + secrets.profile_problems(profile)
    if not problems:
        return
    lines = [f"profile {chain[0].name!r} is not valid:"]
    for loc, what in problems:
        owner = next((r for r in chain if loc in r.doc.lines), None) or \
            next((r for r in chain if loc[:-1] in r.doc.lines), chain[0])
        lines.append(f"  {owner.doc.where(loc)}: {'.'.join(loc)}: {what}")
    raise ProfileError("\n".join(lines))


def load_profile(name: str, extra_dirs: list[Path] | None = None) -> Profile:
    return ProfileStore(extra_dirs).get(name)
