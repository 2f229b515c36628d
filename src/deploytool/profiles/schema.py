"""The fields of a launch profile, as pydantic models, and the server command line they make.

Secrets are fields too, but only as references (SecretRef: a host environment variable or
file), never values: a profile can be shown, copied and committed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import UsageError
from ..redaction import hold
from .image_source import LocalWheel, RuntimeSource

ArgValue = str | int | float | bool | list[str | int | float] | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SecretError(UsageError):
    """A secret the profile names cannot be read on this host."""


class SecretRef(BaseModel):
    """Where a secret lives on the host: an environment variable or a file, exactly one."""

    model_config = ConfigDict(extra="forbid")
    env: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "SecretRef":
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env: NAME or file: PATH")
        return self

    def describe(self) -> str:
        return f"host env {self.env}" if self.env else f"host file {self.file}"

    def reference(self) -> dict[str, str]:
        """What a record may keep: the place, never the value."""
        return {"env": self.env} if self.env else {"file": str(self.file)}

    def resolve(self, env: dict[str, str] | None = None, *, what: str) -> str:
        env = os.environ if env is None else env
        if self.env:
            value = env.get(self.env, "")
            if not value.strip():
                raise SecretError(f"{what} comes from environment variable {self.env}, which is not set or empty",
                                  hint=f"export {self.env}=... in the shell that runs deploytool, or name a file "
                                       "instead ({file: PATH}, mode 0600)")
            hold(value)  # from now on, every output of this process scrubs it
            return value.strip()
        path = Path(str(self.file)).expanduser()
        try:
            value = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SecretError(f"{what} comes from file {path}, which cannot be read ({exc.strerror})",
                              hint="create it (mode 0600) with the value on one line, or use {env: NAME}") from None
        if not value:
            raise SecretError(f"{what} file {path} is empty", hint="write the value on one line")
        hold(value)
        return value


class ProfileSecrets(BaseModel):
    """`secrets:` of a profile."""

    model_config = ConfigDict(extra="forbid")
    hf_token: SecretRef | None = None



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
    # files that replace the index's package of the same name (image_source.py).
    source: RuntimeSource = Field(default_factory=RuntimeSource)
    wheels: list[LocalWheel] = Field(default_factory=list)

    @field_validator("build_args")
    @classmethod
    def _build_args_stay_on_their_line(cls, value: dict[str, str]) -> dict[str, str]:
        # each becomes `ARG NAME="VALUE"` in the Dockerfile: a name that is not an identifier,
        # or a line break in a value, would write Dockerfile lines of the profile's choosing
        for name, text in value.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"build arg name {name!r} is not an identifier (letters, digits, _)")
            if any(c in text for c in "\n\r\0"):
                raise ValueError(f"build arg {name}: the value must be one line (no line break or NUL)")
        return value


class ModelSpec(_Strict):
    # Where the weights come from (deploytool.release.weights checks them): exactly one of `hub` (a hub
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
    # A folder with the model's config.json and safetensors index alone (no weights), relative to
    # the profile file that sets it: what the memory plan reads until the checkpoint is here.
    config: str | None = None

    def mount_point(self) -> str:
        """Where a host folder appears in the container: `path`, else /models/<folder name>."""
        if self.path:
            return self.path
        return f"/models/{Path(str(self.host_path)).name or 'model'}"

    def launch_args(self) -> dict[str, ArgValue]:
        """SGLang's flags for this source, before the hub revision is resolved to a commit
        (release/weights.py pins the commit once it has looked in the hub cache)."""
        if self.hub:
            return {"model-path": self.hub, **({"revision": self.revision} if self.revision else {})}
        if self.host_path:
            return {"model-path": self.mount_point()}
        return {}


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
    # The server's API key: where it lives on the host, never the key, so a profile can be shared (release/secrets.py reads it).
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
    # how long a stop of the serving release waits, after the pre-stop hook, for the requests
    # the server still runs or queues (its own /metrics count); `--drain-timeout` overrides it
    drain_timeout: int = Field(default=30, ge=0)

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


class MonitorSpec(_Strict):
    """What `top` and `monitor` hold the live release to, beyond what qualify already gates
    (the accept length comes from qualify.preflight.expect.min_accept_length): latency targets
    under real traffic, marked in `top` and alerted on by the monitor."""

    ttft_p99_s: float | None = Field(default=None, gt=0)  # time to first token, p99 over a minute
    tpot_p99_s: float | None = Field(default=None, gt=0)  # time per output token, p99 over a minute


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
    # `deploytool tune`'s search space and load (tune/space.py checks it; docs/tune.md)
    tune: dict[str, Any] = Field(default_factory=dict)
    secrets: ProfileSecrets = Field(default_factory=ProfileSecrets)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    watch: WatchSpec = Field(default_factory=WatchSpec)
    monitor: MonitorSpec = Field(default_factory=MonitorSpec)
    # Provenance, filled by the loader, not read from YAML.
    source: str = Field(default="", exclude=True)
    chain: list[str] = Field(default_factory=list, exclude=True)

    @property
    def is_simulator(self) -> bool:
        return self.image.recipe == "sim"

    def launch_args(self) -> dict[str, ArgValue]:
        """The server's flags: those the model source implies (--model-path, --revision), then server.args."""
        return {**self.model.launch_args(), **self.server.args}

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
