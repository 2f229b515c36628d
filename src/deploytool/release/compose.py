"""`deploytool render`: one release's compose document, built as data and dumped with PyYAML.

profile + slot + release number + image -> dict. Nothing here touches the engine; `docker
compose config` validates the result (deploy/ and the tests run it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import FieldError, UsageError
from ..files import write_atomic
from ..host import labels
from ..host.slots import Slot
from ..profiles import Profile, args_to_argv
from ..profiles.rules import launch_argv_problems
from ..resources import resource
from ..yamlio import dump_yaml
from . import secrets as release_secrets
from . import weights as model_sources
from .inputs import beyond_loopback

CACHE_MOUNT = "/cache"


@dataclass
class RenderRequest:
    profile: Profile
    slot: Slot
    release: int
    image: str
    host_port: int | None = None  # default: the profile's port
    bind: str = "127.0.0.1"  # host address the port is published on
    expose_without_key: bool = False  # beyond loopback without a key: the person's decision, labelled
    # the checked model source (None: planned from the profile, unchecked) and the
    # release's secrets (None: planned from the profile). Neither ever holds a secret value.
    model: model_sources.ModelPlan | None = None
    secrets: list[release_secrets.ReleaseSecret] | None = None
    # what the image's runtime is when it is not the pinned wheel (a fork, a tree, local
    # wheels), said by whoever planned the image (image.runtime_source.runtime_notes)
    runtime_notes: tuple[str, ...] = ()

    @property
    def port(self) -> int:
        return self.host_port or self.profile.server.port

    @property
    def exposed_without_key(self) -> bool:
        """Published beyond loopback without a key, because the person said so."""
        return self.expose_without_key and beyond_loopback(self.bind) and self.profile.server.api_key is None

    @property
    def model_plan(self) -> model_sources.ModelPlan:
        return self.model if self.model is not None else model_sources.plan_model(self.profile)

    @property
    def secret_plan(self) -> list[release_secrets.ReleaseSecret]:
        return self.secrets if self.secrets is not None else release_secrets.plan_secrets(self.profile)


def render_compose(req: RenderRequest) -> dict[str, Any]:
    profile, slot = req.profile, req.slot
    document = copy.deepcopy(yaml.safe_load(resource("compose", "base.yaml").read_text()))
    document = {"name": slot.project(req.release), **document}
    service = document["services"]["server"]
    health = profile.health
    container_port = profile.server.port
    cache_volume = slot.cache_volume()
    model, planned = req.model_plan, req.secret_plan
    flags = {**model.launch_args(), **profile.server.args}
    # the profile's loader refuses a key flag too; a profile built in code meets the rule here
    refuse_exposure(profile, req.bind, allowed=req.expose_without_key)
    problems = launch_argv_problems(profile.server.command, flags, profile.server.env)
    if problems:
        where, what = problems[0]
        raise UsageError(f"profile {profile.name}: {'.'.join(where)}: {what}")
    command = profile.server.command + args_to_argv(flags) + release_secrets.launch_args(planned)

    service.update(
        {
            "image": req.image,
            "container_name": f"{slot.project(req.release)}-server",
            "command": command,
            "ports": [
                {"target": container_port, "published": str(req.port), "host_ip": req.bind, "protocol": "tcp"}
            ],
            "environment": {
                **profile.server.env,
                **model.environment(),
                **release_secrets.container_env(planned),
            },
            "volumes": [{"type": "volume", "source": "jit-cache", "target": CACHE_MOUNT}],
            "healthcheck": {
                # curl is in the sim base and in the CUDA images; -f fails on 5xx/503.
                "test": [
                    "CMD",
                    "curl",
                    "-fsS",
                    "-o",
                    "/dev/null",
                    *release_secrets.health_header_args(planned),
                    f"http://127.0.0.1:{container_port}{health.path}",
                ],
                "interval": f"{health.interval}s",
                "timeout": f"{health.timeout}s",
                "retries": health.retries,
                "start_period": f"{health.start_period}s",
                "start_interval": f"{health.start_interval}s",
            },
            "labels": labels.container_labels(
                slot=slot.name,
                release=req.release,
                profile=profile.name,
                image=req.image,
                gpus=list(slot.gpus),
                host_port=req.port,
                host_ip=req.bind,
                simulator=profile.is_simulator,
                model=model.identity(),
                api_key=bool(profile.server.api_key),
                exposed_without_key=req.exposed_without_key,
            ),
        }
    )
    service.update(container_confinement(profile, model, carries_secrets=bool(planned)))
    if profile.server.ulimits:
        service["ulimits"] = dict(profile.server.ulimits)
    service["volumes"] += model.volumes()
    if planned:
        # Compose copies each value from its own environment into /run/secrets/ of the
        # container: no value in this file, in labels or in `docker inspect` (deploytool.release.secrets).
        service["secrets"], document["secrets"] = release_secrets.compose_secrets(planned)
    if not slot.is_cpu:
        service["deploy"] = {
            "resources": {
                "reservations": {
                    "devices": [{"driver": "nvidia", "device_ids": list(slot.gpus), "capabilities": ["gpu"]}]
                }
            }
        }
    # The slot's kernel cache outlives releases: deploytool creates and wipes it (cache.py),
    # compose only mounts it, so `docker compose down` of an old release can never remove it.
    document["volumes"] = {"jit-cache": {"external": True, "name": cache_volume}}
    # The release's own network (compose makes one per project) carries the instance and the
    # slot, as its container does: `down` and a clean-up find it by label, not by name.
    document["networks"] = {
        "default": {
            "labels": {labels.MANAGED: "true", labels.INSTANCE: labels.instance(), labels.SLOT: slot.name}
        }
    }
    return escape_interpolation(document)


# The writable scratch of a read-only root: Python's tempfile and the sockets a runtime names
# there. In memory, counted against the container's memory; noexec as Docker mounts it.
TMP_TMPFS = "/tmp:size=1g,mode=1777"  # nosec B108: the container's own /tmp, a tmpfs


# A server that downloads writes into the host's hub cache, whose folders belong to the host's
# user: root in the container writes there only with this capability (docs/security.md).
DOWNLOAD_CAPABILITY = (
    "DAC_OVERRIDE",
    "the server downloads into the host's hub cache (model.offline: false), "
    "whose folders belong to the host's user",
)


def added_capabilities(profile: Profile, model: model_sources.ModelPlan) -> dict[str, str]:
    """The capabilities given back after every one is dropped, each with why."""
    added = dict(profile.server.cap_add)
    if model.kind == "hub" and not model.offline:
        added.setdefault(*DOWNLOAD_CAPABILITY)
    return added


# Compose puts a secret into the container by copying it into the created container's root
# before the start (`/run/secrets/NAME`, its value never in the file or `docker inspect`), and
# the engine refuses any copy into a read-only root ("container rootfs is marked read-only"):
# a release with secrets keeps its root writable, and says so.
SECRETS_NEED_A_WRITABLE_ROOT = (
    "the release carries secrets, which compose copies into the container's root "
    "before it starts (a read-only root refuses the copy)"
)


def container_confinement(
    profile: Profile, model: model_sources.ModelPlan, *, carries_secrets: bool = False
) -> dict[str, Any]:
    """The IPC namespace, /dev/shm, added capabilities and the root file system, from the profile:
    each loosening only where the profile asks for it with its reason (server.ipc_reason,
    cap_add, writable_root), the weights need it, or the release's secrets do (a read-only
    root refuses compose's copy of them); base.yaml drops every capability and forbids new
    privileges."""
    server = profile.server
    fields: dict[str, Any] = {"ipc": server.ipc}
    if server.ipc != "host":  # with the host's namespace the host's /dev/shm is used, unsized
        fields["shm_size"] = server.shm_size
    added = added_capabilities(profile, model)
    if added:
        fields["cap_add"] = sorted(added)
    if server.writable_root is None and not carries_secrets:
        fields["read_only"] = True
        fields["tmpfs"] = [TMP_TMPFS]
    return fields


def confinement_notes(
    profile: Profile, model: model_sources.ModelPlan, *, carries_secrets: bool = False
) -> list[str]:
    """Each exception to the container's confinement with its reason (docs/security.md)."""
    server = profile.server
    notes = [f"ipc: host, because {server.ipc_reason}"] if server.ipc == "host" else []
    notes += [
        f"capability {name} added back, because {why}"
        for name, why in sorted(added_capabilities(profile, model).items())
    ]
    if server.writable_root is not None:
        notes.append(f"root file system writable, because {server.writable_root}")
    elif carries_secrets:
        notes.append(f"root file system writable, because {SECRETS_NEED_A_WRITABLE_ROOT}")
    return notes


def refuse_exposure(profile: Profile, bind: str, *, allowed: bool) -> None:
    """Publishing beyond loopback without an API key puts the server (SGLang's admin endpoints
    among its routes) in reach of anyone who reaches the host: refused unless the person says so."""
    if beyond_loopback(bind) and profile.server.api_key is None and not allowed:
        raise FieldError(
            "bind",
            f"publishes profile {profile.name}'s server beyond loopback without an API key: "
            "anyone who reaches this host could call it, its admin endpoints included",
            value=bind,
            hint="set server.api_key: {env: NAME} or {file: PATH} in the profile, publish on 127.0.0.1 "
            "behind a gateway, or say so with --expose-without-key (recorded in the release's "
            "labels and the journal)",
        )


def escape_interpolation(value: Any) -> Any:
    """Every string of the document with `$` doubled: compose reads `$` as interpolation from its
    own environment, which holds the secret values at `up` (DEPLOYTOOL_SECRET_*), so a profile's
    `${DEPLOYTOOL_SECRET_HF_TOKEN}` would otherwise become the token in clear; `$$` is a literal `$`."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {k: escape_interpolation(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_interpolation(v) for v in value]
    return value


def render_text(req: RenderRequest) -> str:
    return document_text(
        render_compose(req),
        profile=req.profile.name,
        slot=req.slot.name,
        release=req.release,
        notes=render_notes(req),
    )


def render_notes(req: RenderRequest) -> list[str]:
    """Where the runtime and the weights come from and where each secret goes (references, never values)."""
    return (
        list(req.runtime_notes)
        + model_sources.describe_for_render(req.model_plan)
        + release_secrets.describe_for_render(req.secret_plan)
        + confinement_notes(req.profile, req.model_plan, carries_secrets=bool(req.secret_plan))
    )


def document_text(
    document: dict[str, Any], *, profile: str, slot: str, release: int, notes: list[str] | None = None
) -> str:
    """A rendered compose document as the file deploytool writes (a plan carries the document)."""
    header = (
        f"# Rendered by deploytool for profile {profile}, slot {slot}, "
        f"release {release}.\n# Do not edit: re-render with `deploytool render`.\n"
    )
    header += "".join(f"# {line}\n" for line in notes or [])
    return header + dump_yaml(document)


def write_compose(req: RenderRequest, path: Path) -> Path:
    return write_atomic(path, render_text(req))
