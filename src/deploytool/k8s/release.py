"""What every Kubernetes object of a release shares, derived from the profile the compose
renderer uses: the request, names, what the profile implies (nodes, GPUs, shm, toolchain
fingerprint, model source), labels and annotations. pod.py builds the pod from these.

Pure functions of a K8sRequest; nothing here talks to a cluster.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import FieldError, FieldSentenceError, UsageError
from ..host.slots import DEFAULT_RETENTION  # releases kept for rollback, as `up --retention`
from ..profiles import Profile
from ..release.weights import CONTAINER_HUB_CACHE, ModelPlan, plan_model
from ..resources import resource

DIGEST_REF = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
CACHE_MOUNT = "/cache"  # where the image's cache env vars point (recipes/sglang.py CACHE_ENV)
CACHE_HOST_ROOT = "/var/lib/deploytool/jit-cache"
FINGERPRINT_FILE = ".deploytool-fingerprint.json"  # the same stamp file as cache.py
LABEL_DOMAIN = "deploytool.dev"
# The flags a multi-node SGLang launch takes per pod; LeaderWorkerSet injects the values as
# env vars (LWS_LEADER_ADDRESS, LWS_GROUP_SIZE, LWS_WORKER_INDEX: api/leaderworkerset/v1/
# leaderworkerset_types.go in kubernetes-sigs/lws) that the kubelet expands in argv.
MULTINODE_FLAGS = ("nnodes", "node-rank", "dist-init-addr")
DIST_INIT_PORT = 20000
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # published by GPU feature discovery

Track = Literal["stable", "canary"]


@dataclass
class K8sRequest:
    profile: Profile
    image: str  # by digest: a cluster pulls on every node, a tag could move between pulls
    toolchain: dict[str, Any]  # the image's toolchain fingerprint (declared_toolchain or its label)
    release: int = 1
    replicas: int = 1
    namespace: str = "default"
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    qualify_image: str | None = None  # an image with deploytool installed, for the qualify Job
    retention: int = DEFAULT_RETENTION
    secret_name: str = "deploytool"  # the Secret holding hf_token / api_key (referenced, never read)
    flavor: Literal["plain", "ome"] = "plain"

    def __post_init__(self) -> None:
        if not DIGEST_REF.match(self.image):
            raise FieldSentenceError(
                "image",
                "is not pinned by digest (expected NAME@sha256:<64 hex>)",
                value=repr(self.image),
                hint="push the image to a registry the cluster pulls from and pass the reference "
                "with its digest (`docker inspect --format '{{index .RepoDigests 0}}' IMAGE`)",
            )
        if self.qualify_image is not None and not DIGEST_REF.match(self.qualify_image):
            raise FieldSentenceError(
                "qualify_image", "is not pinned by digest", value=repr(self.qualify_image)
            )
        if self.replicas < 1:
            raise FieldError("replicas", "at least one serving copy is needed", value=str(self.replicas))
        if self.retention < 1:
            raise FieldError(
                "retention", "keep at least one previous release to roll back to", value=str(self.retention)
            )
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", self.namespace) or len(self.namespace) > 63:
            raise FieldSentenceError(
                "namespace",
                "is not a Kubernetes namespace name (lowercase letters, digits and '-', at most 63)",
                value=repr(self.namespace),
            )

    @property
    def app(self) -> str:
        return app_name(self.profile)

    @property
    def job_image(self) -> str:
        if self.qualify_image:
            return self.qualify_image
        # Neither release image can run it: the sglang image has no deploytool, the reference
        # runtime's has only deploytool.sim's dependencies (images/sim/Dockerfile.j2).
        raise FieldError(
            "qualify_image",
            "the qualification Job needs an image with deploytool installed: give one as NAME@sha256:...",
            hint=f"build the qualify image, {resource('images', 'qualify', 'Dockerfile')} (deploytool's "
            "wheel and python3; the recipe is in docs/kubernetes.md, 'The qualify image'), push it "
            "to a registry the cluster pulls from, and pass it by digest",
        )


# -- derived from the profile -----------------------------------------------------------------
def app_name(profile: Profile) -> str:
    """A DNS-1035 label (Service names need one): the profile name without dots, leaving room
    for '-canary' and '-qualify-rNNNN' within 63 characters."""
    name = re.sub(r"[^a-z0-9-]", "-", profile.name.lower()).strip("-")
    if not name[:1].isalpha():
        name = "dt-" + name
    if len(name) > 45:
        name = name[:38].rstrip("-") + "-" + hashlib.sha256(profile.name.encode()).hexdigest()[:6]
    return name


def nodes(profile: Profile) -> int:
    """How many nodes one serving copy spans: SGLang's own --nnodes in the profile's args.
    More than one needs a LeaderWorkerSet (a Deployment's pods are independent)."""
    value = profile.server.args.get("nnodes", 1)
    count = None
    if isinstance(value, (str, int, float)):  # not a list, not null
        with contextlib.suppress(ValueError):
            count = int(value)
    if count is None:
        raise UsageError(f"profile {profile.name}: server.args.nnodes must be a whole number, got {value!r}")
    if count < 1:
        raise UsageError(f"profile {profile.name}: server.args.nnodes must be at least 1")
    return count


def workload_kind(profile: Profile) -> str:
    return "LeaderWorkerSet" if nodes(profile) > 1 else "Deployment"


def gpus_per_pod(profile: Profile) -> int:
    """match.gpu_count is the cards of one host (what `up --gpu` pins), so of one pod."""
    return 0 if profile.is_simulator else profile.match.gpu_count


def gpu_products(profile: Profile) -> list[str]:
    """GPU feature discovery publishes the product name with spaces as '-' (e.g. NVIDIA-H200)."""
    return [
        re.sub(r"[^A-Za-z0-9_.-]", "-", name.strip().replace(" ", "-"))[:63]
        for name in profile.match.gpu_name
    ]


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([bkmgt]?)b?$", re.IGNORECASE)


def shm_quantity(size: str) -> str:
    """Docker's shm_size ('32g': binary units) as a Kubernetes quantity ('32Gi')."""
    match = _SIZE.match(size.strip())
    if not match:
        raise UsageError(f"server.shm_size {size!r} is not a size like 32g or 512m")
    number, unit = match.groups()
    suffix = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}[unit.lower()]
    return f"{number}{suffix}"


def declared_toolchain(profile: Profile) -> dict[str, Any]:
    """The toolchain fingerprint `build` labels the image with, computed from the profile's
    pins without an engine or a download: the recipe's own pure `declare()` (what `build`
    and the image tag use)."""
    from ..image.recipes import load_recipe

    recipe = load_recipe(profile.image.recipe)
    recipe.check(profile)
    inputs = recipe.declare(profile, wheelhouse=None)
    return {**inputs.fingerprint, "recipe": profile.image.recipe}


def fingerprint_key(toolchain: dict[str, Any]) -> str:
    """12 hex of the fingerprint: the JIT cache folder's name and a label value. A new
    deploytool alone changes no kernel, so its version is left out (as cache.py does)."""
    kept = {k: v for k, v in toolchain.items() if k != "deploytool"}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


# A hub model (the profile's model.hub) is served from a hub cache: on Kubernetes, the node's
# folder below, mounted where the Docker path mounts the host's (weights.CONTAINER_HUB_CACHE).
HUB_CACHE_HOST = "/var/lib/deploytool/hf-cache/hub"
HUB_CACHE_CONTAINER = CONTAINER_HUB_CACHE


def _model(profile: Profile) -> ModelPlan:
    # The node's cache replaces the host's, so the host's environment is not read (env={}).
    return plan_model(profile, env={})


def hub_repo(profile: Profile) -> str | None:
    return profile.model.hub


def hub_writable(profile: Profile) -> bool:
    """Offline (the default) means the server neither downloads nor writes the cache."""
    return bool(profile.model.hub) and not profile.model.offline


def model_env(profile: Profile) -> dict[str, str]:
    """As the Docker path sets it (ModelPlan.environment): HF_HUB_CACHE, and HF_HUB_OFFLINE=1
    unless the profile lets the server download."""
    return _model(profile).environment()


def model_mount_path(profile: Profile) -> str:
    """Where the weights appear in the container: the hub cache for a hub model, the folder's
    mount point (ModelSpec.mount_point: model.path, else /models/<folder name>, which is
    what --model-path says), else /models/<served name> for a PVC the operator provides."""
    model = _model(profile)
    if model.kind == "hub":
        return HUB_CACHE_CONTAINER
    if model.kind == "folder":
        return str(model.container_path)
    return f"/models/{profile.model.served_name}"


def model_revision(profile: Profile) -> str:
    return str(profile.model.revision or "unpinned")


# -- labels -----------------------------------------------------------------------------------
def selector(req: K8sRequest, track: Track) -> dict[str, str]:
    """Immutable Deployment selectors: the app and the track, never the release."""
    return {"app.kubernetes.io/name": req.app, f"{LABEL_DOMAIN}/track": track}


def labels(req: K8sRequest, track: Track = "stable") -> dict[str, str]:
    return {
        **selector(req, track),
        "app.kubernetes.io/managed-by": "deploytool",
        "app.kubernetes.io/component": "inference-server",
        f"{LABEL_DOMAIN}/profile": req.profile.name[:63],
        f"{LABEL_DOMAIN}/release": str(req.release),
        f"{LABEL_DOMAIN}/toolchain": fingerprint_key(req.toolchain),
    }


def release_annotations(req: K8sRequest) -> dict[str, str]:
    """What does not fit a label (63 characters, no '/' or '@'): the image reference, the
    whole fingerprint, the model revision."""
    return {
        f"{LABEL_DOMAIN}/profile": req.profile.name,
        f"{LABEL_DOMAIN}/release": str(req.release),
        f"{LABEL_DOMAIN}/image": req.image,
        f"{LABEL_DOMAIN}/toolchain": json.dumps(req.toolchain, sort_keys=True),
        f"{LABEL_DOMAIN}/model-revision": model_revision(req.profile),
        f"{LABEL_DOMAIN}/retention": str(req.retention),
        f"{LABEL_DOMAIN}/simulator": "true" if req.profile.is_simulator else "false",
    }


def metadata(
    req: K8sRequest, name: str, track: Track = "stable", *, namespaced: bool = True
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = req.namespace
    meta["labels"] = labels(req, track)
    meta["annotations"] = release_annotations(req)
    return meta


# -- command-line values ------------------------------------------------------------------------
def parse_node_selectors(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FieldError(
                "node_selector", "expected KEY=VALUE, e.g. nvidia.com/gpu.count=8", value=repr(item)
            )
        out[key] = value
    return out


def parse_tolerations(items: list[str] | None) -> list[dict[str, Any]]:
    """KEY[=VALUE]:EFFECT, as kubectl taint writes them (no value: operator Exists)."""
    out = []
    for item in items or []:
        spec, sep, effect = item.rpartition(":")
        if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not spec:
            raise FieldError(
                "tolerations",
                "expected KEY[=VALUE]:EFFECT with EFFECT one of NoSchedule, PreferNoSchedule, NoExecute",
                value=repr(item),
            )
        key, has_value, value = spec.partition("=")
        toleration: dict[str, Any] = {
            "key": key,
            "operator": "Equal" if has_value else "Exists",
            "effect": effect,
        }
        if has_value:
            toleration["value"] = value
        out.append(toleration)
    return out
