"""The one place that knows deploytool's container and image label names.

The engine is the source of truth for what runs where: every container deploytool starts
carries these labels, and status/rollback find releases by them, never by name guessing.
"""

from __future__ import annotations

import os
import re

PREFIX = "dev.deploytool"
MANAGED = f"{PREFIX}.managed"
INSTANCE = f"{PREFIX}.instance"
SLOT = f"{PREFIX}.slot"
RELEASE = f"{PREFIX}.release"
PROFILE = f"{PREFIX}.profile"
IMAGE = f"{PREFIX}.image"
GPUS = f"{PREFIX}.gpus"
HOST_PORT = f"{PREFIX}.host-port"
HOST_IP = f"{PREFIX}.host-ip"
SIMULATOR = f"{PREFIX}.simulator"
MODEL = f"{PREFIX}.model"  # which weights: hub:ORG/NAME@commit or folder:PATH#fingerprint
API_KEY = f"{PREFIX}.api-key"  # "required" or "none": whether the server wants a key (never the key)
# "true" on a release published beyond loopback without a key because its person said so
# (`up --expose-without-key`); absent otherwise
EXPOSED_WITHOUT_KEY = f"{PREFIX}.exposed-without-key"
CPU_TWIN = f"{PREFIX}.cpu-twin"  # a GPU release's CPU twin (deploy/cpu_twin.py): the release's project; not a release
THROWAWAY = f"{PREFIX}.throwaway"  # a script's container (Engine.run_throwaway): the instance; not a release

# Image labels (beside the OCI ones): the toolchain fingerprint and the build inputs.
IMAGE_INPUTS_HASH = f"{PREFIX}.inputs-hash"
IMAGE_RECIPE = f"{PREFIX}.recipe"
IMAGE_PROFILE = f"{PREFIX}.build-profile"
IMAGE_FINGERPRINT = f"{PREFIX}.toolchain"  # JSON object: cuda, compiler, runtime, kernels, patches, ...
IMAGE_RUNTIME_SOURCE = (
    f"{PREFIX}.runtime-source"  # JSON: a fork's commit, a tree's sha256, a series' sha256 (no host path)
)
IMAGE_LOCAL_WHEELS = f"{PREFIX}.local-wheels"  # JSON list: each of image.wheels' name, version, file, sha256
VOLUME_CACHE = f"{PREFIX}.cache"


def instance() -> str:
    """Which deploytool owns a container. DEPLOYTOOL_INSTANCE lets a test suite (or a second
    team on one host) work on the same engine without ever touching another's releases."""
    name = os.environ.get("DEPLOYTOOL_INSTANCE", "default")
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
        raise ValueError(f"DEPLOYTOOL_INSTANCE={name!r}: use lowercase letters, digits, '-' and '_'")
    return name


def name_prefix() -> str:
    """'deploytool' for the default instance, 'deploytool-<instance>' for any other."""
    return "deploytool" if instance() == "default" else f"deploytool-{instance()}"


def container_labels(
    *,
    slot: str,
    release: int,
    profile: str,
    image: str,
    gpus: list[str],
    host_port: int,
    host_ip: str,
    simulator: bool,
    model: str = "none",
    api_key: bool = False,
    exposed_without_key: bool = False,
) -> dict[str, str]:
    exposure = {EXPOSED_WITHOUT_KEY: "true"} if exposed_without_key else {}
    return {
        MANAGED: "true",
        INSTANCE: instance(),
        SLOT: slot,
        RELEASE: str(release),
        PROFILE: profile,
        IMAGE: image,
        GPUS: ",".join(gpus),
        HOST_PORT: str(host_port),
        HOST_IP: host_ip,
        SIMULATOR: "true" if simulator else "false",
        MODEL: model,
        API_KEY: "required" if api_key else "none",
        **exposure,
    }
