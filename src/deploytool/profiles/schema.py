"""The fields of a launch profile, as pydantic models, and the server command line they make.

Secrets are fields too, but only as references (SecretRef, secret_refs.py: a host environment
variable or file), never values: a profile can be shown, copied and committed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .image_source import LocalWheel, RuntimeSource
from .secret_refs import SecretRef

ArgValue = str | int | float | bool | list[str | int | float] | None

# capabilities(7), as Docker names them (without CAP_): what server.cap_add may add back
LINUX_CAPABILITIES = frozenset(
    [
        "AUDIT_CONTROL",
        "AUDIT_READ",
        "AUDIT_WRITE",
        "BLOCK_SUSPEND",
        "BPF",
        "CHECKPOINT_RESTORE",
        "CHOWN",
        "DAC_OVERRIDE",
        "DAC_READ_SEARCH",
        "FOWNER",
        "FSETID",
        "IPC_LOCK",
        "IPC_OWNER",
        "KILL",
        "LEASE",
        "LINUX_IMMUTABLE",
        "MAC_ADMIN",
        "MAC_OVERRIDE",
        "MKNOD",
        "NET_ADMIN",
        "NET_BIND_SERVICE",
        "NET_BROADCAST",
        "NET_RAW",
        "PERFMON",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_CHROOT",
        "SYS_MODULE",
        "SYS_NICE",
        "SYS_PACCT",
        "SYS_PTRACE",
        "SYS_RAWIO",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "SYSLOG",
        "WAKE_ALARM",
    ]
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProfileSecrets(BaseModel):
    """`secrets:` of a profile."""

    model_config = ConfigDict(extra="forbid")
    hf_token: SecretRef | None = Field(
        default=None,
        description="the hub token, for gated or private repositories: reaches the container as "
        "/run/secrets/hf_token with HF_TOKEN_PATH pointing at it",
    )


class MatchSpec(_Strict):
    """Which cards a profile is made for."""

    gpu_name: list[str] = Field(
        default_factory=list,
        description="the card names it is made for, as the driver spells them (`deploytool gpus`)",
    )
    compute_capability: str | None = Field(
        default=None,
        pattern=r"^\d+\.\d+$",
        description="MAJOR.MINOR; a hard limit: kernels are built per architecture",
    )
    min_memory_gib: float | None = Field(
        default=None, gt=0, description="a card with less memory is runnable-with-less-memory"
    )
    gpu_count: int = Field(default=1, ge=1, description="cards per release; a hard limit")


class ImageSpec(_Strict):
    """The pinned inputs of the image; every field goes into the image tag's hash."""

    recipe: str = Field(description="images/<recipe>/ and deploytool.image.recipes.<recipe> (sglang, sim)")
    base: str = Field(
        description="the base image: a tag (the shipped profiles), or REF@sha256:DIGEST to pin it"
    )
    base_source: Literal["registry", "wheels"] = Field(
        default="registry",
        description="registry: `base` is an nvidia/cuda image (pulled by digest); wheels: `base` "
        "is a plain OS image (deploytool/base:bookworm) and the CUDA toolkit comes "
        "from NVIDIA's pinned wheels",
    )
    python: str = Field(default="3.11", description="the image's Python version, MAJOR.MINOR")
    cuda: str | None = Field(default=None, description="the CUDA toolkit version, MAJOR.MINOR[.PATCH]")
    torch_version: str | None = Field(default=None, description="torch, pinned")
    runtime_version: str | None = Field(default=None, description="sglang, pinned")
    kernel_version: str | None = Field(default=None, description="sglang-kernel, pinned")
    flashinfer_version: str | None = Field(default=None, description="flashinfer, pinned")
    patches: list[str] = Field(
        default_factory=list, description="from images/sglang/patches/<version>/series: [] all, [none] none"
    )
    build_args: dict[str, str] = Field(
        default_factory=dict,
        description='NAME: value, each an `ARG NAME="value"` line: names are identifiers, values one line',
    )
    source: RuntimeSource = Field(
        default_factory=RuntimeSource,
        description="where sglang comes from: the pinned wheel, a fork at a commit, a "
        "local tree (docs/recipes.md)",
    )
    wheels: list[LocalWheel] = Field(
        default_factory=list, description="wheel files that replace the index's package of the same name"
    )


class ModelSpec(_Strict):
    """The model and where its weights come from (deploytool.release.weights checks them):
    exactly one of `hub` and `host_path`; simulator profiles may omit both."""

    hub: str | None = Field(
        default=None, description="a hub repository ORG/NAME, served from the host's hub cache"
    )
    revision: str | None = Field(default=None, description="hub only: branch, tag or commit (default main)")
    offline: bool = Field(
        default=True,
        description="hub only: HF_HUB_OFFLINE=1 and a read-only cache; false lets the server download",
    )
    host_path: str | None = Field(
        default=None, description="a host folder holding config.json and *.safetensors, mounted read-only"
    )
    path: str | None = Field(
        default=None, description="where host_path appears in the container (default /models/<folder name>)"
    )
    served_name: str = Field(description="the model name the server answers to")
    context_length: int = Field(gt=0, description="tokens of prompt and answer together")
    vision: bool = Field(default=False, description="the model takes images")
    tools: bool = Field(default=False, description="the model calls tools")
    tokenizer: str | None = Field(default=None, description="a tokenizer other than the model's own")
    config: str | None = Field(
        default=None,
        description="a folder with the model's config.json and safetensors "
        "index alone, relative to the profile file: what the memory "
        "plan reads until the checkpoint is here",
    )

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
    """How the server is started in its container."""

    port: int = Field(ge=1, le=65535, description="the port the server listens on in the container")
    command: list[str] = Field(description="the server's command, before its flags")
    args: dict[str, ArgValue] = Field(
        default_factory=dict,
        description="SGLang's flag names without the leading --: true is a bare flag, false "
        "and null leave it out, a list repeats its values; --model-path (and "
        "--revision) come from model:",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="the container's environment; numbers and booleans become text"
    )
    shm_size: str = Field(
        default="32g",
        description="the container's /dev/shm (its private IPC namespace's): "
        "NCCL, SGLang's broadcast queues and image transport use it; a size such as "
        "32g or 1024m",
    )
    ipc: Literal["private", "shareable", "host"] = Field(
        default="private",
        description="the container's IPC namespace; host shares the host's /dev/shm and SysV "
        "IPC with the server and needs ipc_reason",
    )
    ipc_reason: str | None = Field(
        default=None,
        description="why this server needs the host's IPC namespace "
        "(one line, shown in the rendered compose file)",
    )
    writable_root: str | None = Field(
        default=None,
        description="why the container's root file system must stay writable (one line, shown in the "
        "rendered compose file); unset: a read-only root with /tmp in memory",
    )
    cap_add: dict[str, str] = Field(
        default_factory=dict,
        description="capabilities added back after every one is dropped, each with why "
        '(NET_BIND_SERVICE: "...")',
    )
    # SGLang's own compose file: unlimited locked memory for pinned buffers, a large stack.
    ulimits: dict[str, int] = Field(
        default_factory=lambda: {"memlock": -1, "stack": 67108864},
        description="the container's limits; a host that forbids raising one refuses to start it: set {} there",
    )
    api_key: SecretRef | None = Field(
        default=None,
        description="where the server's API key lives on the host, never the key: callers must "
        'send it (docs/profiles.md "Access")',
    )

    @model_validator(mode="after")
    def _exceptions_say_why(self) -> ServerSpec:
        # each loosening of the container's defaults is argued where it is asked for, and the
        # reason is printed into a compose file's comment header: one line of text
        for field, reason in [
            ("ipc_reason", self.ipc_reason),
            ("writable_root", self.writable_root),
            *((f"cap_add.{name}", why) for name, why in self.cap_add.items()),
        ]:
            if reason is not None and (not reason.strip() or any(ord(c) < 32 or c == "\x7f" for c in reason)):
                raise ValueError(f"{field}: the reason must be one line of text, not empty")
        if self.ipc == "host" and self.ipc_reason is None:
            raise ValueError(
                "ipc: host shares the host's /dev/shm and SysV IPC with the server: say why in "
                "server.ipc_reason, or leave ipc out (a private namespace, /dev/shm of shm_size)"
            )
        if self.ipc != "host" and self.ipc_reason is not None:
            raise ValueError(
                f"ipc_reason is the reason for ipc: host, but ipc is {self.ipc}: remove one of them"
            )
        for name in self.cap_add:
            if name not in LINUX_CAPABILITIES:
                raise ValueError(
                    f"cap_add: {name!r} is not a Linux capability (names without CAP_, e.g. SYS_NICE)"
                )
        return self

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, value: Any) -> Any:
        # YAML reads `1` and `true` as numbers and booleans; the container sees text.
        if isinstance(value, dict):
            return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}
        return value


class HealthSpec(_Strict):
    """The container's health check, and how long a stop waits for requests in flight."""

    path: str = Field(default="/health", description="the path the health check calls")
    start_period: int = Field(
        default=900, ge=0, description="seconds a start may take before failed checks count"
    )
    start_interval: int = Field(default=2, ge=1, description="seconds between checks during the start period")
    interval: int = Field(default=10, ge=1, description="seconds between checks after it")
    timeout: int = Field(default=25, ge=1, description="seconds one check may take")
    retries: int = Field(
        default=3, ge=1, description="consecutive failed checks that make the container unhealthy"
    )
    drain_timeout: int = Field(
        default=30,
        ge=0,
        description="seconds a stop of the serving release waits, after the pre-stop hook, for "
        "the requests the server still runs or queues; --drain-timeout overrides it",
    )

    def budget_seconds(self) -> int:
        """How long a start may take before it counts as failed: the moment the engine's health
        check can first count the container unhealthy (its `retries`-th failed check, the first
        started once start_period is over and each next one `interval` after the last ended;
        checks that take their time only make that later). deploytool's wait ends there too, so
        the plan's figure is the one that applies, whichever of the two notices first."""
        return self.start_period + (self.retries - 1) * self.interval

    def budget_rule(self) -> str:
        """budget_seconds() as the profile's fields make it, for plans and errors."""
        return (
            f"health.start_period {self.start_period} s + (health.retries {self.retries} - 1) x "
            f"health.interval {self.interval} s"
        )


class RolloutSpec(_Strict):
    """`deploytool rollout`: the suites the slots after the canary run (they run the image the
    canary qualified, so a shorter set checks that each card serves it)."""

    qualify: list[str] = Field(
        default_factory=lambda: ["preflight", "contract", "performance"],
        description="the suites each slot after the canary runs",
    )
    quick_performance: bool = Field(
        default=True, description="performance in its quick form on the slots after the canary"
    )


class WatchSpec(_Strict):
    """`deploytool watch`: when to restart a release whose health probe fails, and when a
    release that keeps failing right after its cut-over is rolled back instead."""

    interval: float = Field(default=10, gt=0, description="seconds between probes of each slot")
    failures: int = Field(default=3, ge=1, description="consecutive failed probes before a restart")
    backoff: float = Field(
        default=30, ge=0, description="seconds after a restart before the next; doubles each time"
    )
    backoff_max: float = Field(default=600, ge=0, description="the most the backoff grows to, seconds")
    max_restarts_per_hour: int = Field(
        default=6, ge=0, description="restarts of one slot in an hour before watch stops restarting it"
    )
    crash_loop_window: float = Field(
        default=900,
        ge=0,
        description="seconds after a cut-over in which a crash loop rolls back; 0: never roll back",
    )
    crash_loop_restarts: int = Field(
        default=3, ge=1, description="restarts within the window that make a crash loop"
    )


class MonitorSpec(_Strict):
    """What `top` and `monitor` hold the live release to, beyond what qualify already gates
    (the accept length comes from qualify.preflight.expect.min_accept_length): latency targets
    under real traffic, marked in `top` and alerted on by the monitor."""

    ttft_p99_s: float | None = Field(
        default=None, gt=0, description="time to first token, p99 over a minute, seconds"
    )
    tpot_p99_s: float | None = Field(
        default=None, gt=0, description="time per output token, p99 over a minute, seconds"
    )


class Profile(_Strict):
    """One card-and-model launch."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", description="lowercase letters, digits, . _ -")
    description: str = Field(default="", description="one line for `profiles list`")
    abstract: bool = Field(default=False, description="a base for others, never deployed; not inherited")
    match: MatchSpec = Field(default_factory=MatchSpec, description="which cards it is made for")
    image: ImageSpec = Field(description="the pinned inputs of the image")
    model: ModelSpec = Field(description="the model and where its weights come from")
    server: ServerSpec = Field(description="how the server starts")
    health: HealthSpec = Field(default_factory=HealthSpec, description="the health check and the drain")
    qualify: dict[str, Any] = Field(
        default_factory=dict, description="the suites and their gates (docs/qualify.md)"
    )
    bench: dict[str, Any] = Field(
        default_factory=dict, description="the benchmark's load and gates (docs/bench.md)"
    )
    tune: dict[str, Any] = Field(
        default_factory=dict, description="`deploytool tune`'s search space and load (docs/tune.md)"
    )
    secrets: ProfileSecrets = Field(
        default_factory=ProfileSecrets, description="references to secrets on the host"
    )
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec, description="`deploytool rollout` (docs/rollout.md)"
    )
    watch: WatchSpec = Field(default_factory=WatchSpec, description="`deploytool watch` (docs/watch.md)")
    monitor: MonitorSpec = Field(
        default_factory=MonitorSpec,
        description="what `top` and `monitor` hold the live release to (docs/monitor.md)",
    )
    # Provenance, filled by the loader, not read from YAML.
    source: str = Field(
        default="", exclude=True, description="the file it was read from (filled by the loader)"
    )
    chain: list[str] = Field(
        default_factory=list, exclude=True, description="its `extends` chain (filled by the loader)"
    )

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
