"""What every Kubernetes object of a release shares, derived from the profile the compose
renderer uses (launch argv, env, health, shm, GPU count): names, labels, the server container,
its probes and volumes.

Pure functions of a K8sRequest; nothing here talks to a cluster.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..deploy import DEFAULT_RETENTION  # releases kept for rollback, as `up --retention`
from ..errors import UsageError
from ..profiles import Profile, args_to_argv

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
    secret_name: str = "deploytool"  # the Secret holding hf-token / api-key (referenced, never read)
    flavor: Literal["plain", "ome"] = "plain"

    def __post_init__(self) -> None:
        if not DIGEST_REF.match(self.image):
            raise UsageError(f"--image {self.image!r} is not pinned by digest (expected NAME@sha256:<64 hex>)",
                             hint="push the image to a registry the cluster pulls from and pass the reference "
                                  "with its digest (`docker inspect --format '{{index .RepoDigests 0}}' IMAGE`)")
        if self.qualify_image is not None and not DIGEST_REF.match(self.qualify_image):
            raise UsageError(f"--qualify-image {self.qualify_image!r} is not pinned by digest")
        if self.replicas < 1:
            raise UsageError(f"--replicas {self.replicas}: at least one serving copy is needed")
        if self.retention < 1:
            raise UsageError(f"--retention {self.retention}: keep at least one previous release to roll back to")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", self.namespace) or len(self.namespace) > 63:
            raise UsageError(f"--namespace {self.namespace!r} is not a Kubernetes namespace name "
                             "(lowercase letters, digits and '-', at most 63)")

    @property
    def app(self) -> str:
        return app_name(self.profile)

    @property
    def job_image(self) -> str:
        if self.qualify_image:
            return self.qualify_image
        # Neither release image can run it: the sglang image has no deploytool, the reference
        # runtime's has only deploytool.sim's dependencies (images/sim/Dockerfile.j2).
        raise UsageError("the qualification Job needs an image with deploytool installed: pass --qualify-image "
                         "NAME@sha256:...",
                         hint="any Python image with `pip install deploytool` (and python3 on PATH), pushed to a "
                              "registry the cluster pulls from")


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
    try:
        count = int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"profile {profile.name}: server.args.nnodes must be a whole number, got {value!r}") from None
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
    return [re.sub(r"[^A-Za-z0-9_.-]", "-", name.strip().replace(" ", "-"))[:63] for name in profile.match.gpu_name]


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
    pins without an engine: the recipe's own pure `declare()` where it has one, else its
    `prepare()` into a throwaway folder (the sim recipe's pins read directly: its prepare
    downloads wheels)."""
    from ..recipes import load_recipe, recipe_dir

    recipe = load_recipe(profile.image.recipe)
    recipe.check(profile)
    if hasattr(recipe, "declare"):
        inputs = recipe.declare(profile, wheelhouse=None)
    elif profile.is_simulator:
        pins = dict(line.split("==", 1) for line in recipe._pins(recipe_dir("sim") / "requirements.txt"))
        return {"python": profile.image.python, "cuda": "none", **pins, "recipe": "sim"}
    else:
        with tempfile.TemporaryDirectory(prefix="k8s-fingerprint-") as tmp:
            inputs = recipe.prepare(profile, context_dir=Path(tmp), wheelhouse=None)
    return {**inputs.fingerprint, "recipe": profile.image.recipe}


def fingerprint_key(toolchain: dict[str, Any]) -> str:
    """12 hex of the fingerprint: the JIT cache folder's name and a label value. A new
    deploytool alone changes no kernel, so its version is left out (as cache.py does)."""
    kept = {k: v for k, v in toolchain.items() if k != "deploytool"}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


# A hub model (issue 13's model.hub) is served from a hub cache: on Kubernetes, the node's
# folder below, where huggingface_hub looks in the container (issue 13's CONTAINER_HUB_CACHE).
HUB_CACHE_HOST = "/var/lib/deploytool/hf-cache/hub"
HUB_CACHE_CONTAINER = "/root/.cache/huggingface/hub"


def hub_repo(profile: Profile) -> str | None:
    return getattr(profile.model, "hub", None)


def hub_writable(profile: Profile) -> bool:
    """Offline (the default) means the server neither downloads nor writes the cache."""
    return bool(hub_repo(profile)) and getattr(profile.model, "offline", True) is False


def model_env(profile: Profile) -> dict[str, str]:
    if hub_repo(profile) and getattr(profile.model, "offline", True) is not False:
        return {"HF_HUB_OFFLINE": "1"}
    return {}


def model_mount_path(profile: Profile) -> str:
    """Where the weights appear in the container: the hub cache for a hub model, model.path,
    else (issue 13 makes it optional) /models/<folder name of host_path, or the served name>."""
    if hub_repo(profile):
        return HUB_CACHE_CONTAINER
    if profile.model.path:
        return profile.model.path
    folder = Path(profile.model.host_path).name if profile.model.host_path else profile.model.served_name
    return f"/models/{folder}"


def model_revision(profile: Profile) -> str:
    # model.revision comes with the hub fields (issue 13); until then a local path has none.
    return str(getattr(profile.model, "revision", None) or "unpinned")


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


def annotations(req: K8sRequest) -> dict[str, str]:
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


def metadata(req: K8sRequest, name: str, track: Track = "stable", *, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = req.namespace
    meta["labels"] = labels(req, track)
    meta["annotations"] = annotations(req)
    return meta


# -- secrets ----------------------------------------------------------------------------------
# The Secret `req.secret_name` (k8s apply --secret) holds the values under these keys; deploytool
# names it and never reads it. A profile says which it needs: `secrets.hf_token` and
# `server.api_key` (issue 13: where the value lives on a Docker host; on Kubernetes, the Secret).
HF_TOKEN_KEY = "hf-token"
API_KEY_KEY = "api-key"
API_KEY_ENV = "DEPLOYTOOL_API_KEY"  # what `deploytool qualify --url` reads the key from (issue 13)
# SGLang 0.5.23 has no environment variable for --api-key; `--config FILE.yaml` merges a YAML
# file of options into the command line (server_args.py prepare_server_args ->
# utils/server_args_config_parser.py), so the key reaches the server in a file, not in argv.
SECRET_MOUNT = "/run/secrets/deploytool"
CONFIG_DIR = "/run/deploytool"
SGLANG_CONFIG = f"{CONFIG_DIR}/sglang-config.yaml"


def _declared(profile: Profile, section: str, name: str) -> bool:
    holder = getattr(profile, section, None) if section else profile
    return getattr(holder, name, None) is not None


def needs_hf_token(profile: Profile) -> bool:
    return _declared(profile, "secrets", "hf_token")


def has_api_key(profile: Profile) -> bool:
    return _declared(profile, "server", "api_key")


def secret_env(req: K8sRequest) -> list[dict[str, Any]]:
    """The hub token as a secretKeyRef: the manifest names the Secret, never holds the value.
    Optional unless the profile declares it needs a token."""
    ref = {"name": req.secret_name, "key": HF_TOKEN_KEY}
    if not needs_hf_token(req.profile):
        ref["optional"] = True
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": ref}}]


def api_key_env(req: K8sRequest) -> list[dict[str, Any]]:
    """For the qualify Job, which sends the key (issue 13's DEPLOYTOOL_API_KEY)."""
    if not has_api_key(req.profile):
        return []
    return [{"name": API_KEY_ENV, "valueFrom": {"secretKeyRef": {"name": req.secret_name, "key": API_KEY_KEY}}}]


def api_key_init_container(req: K8sRequest) -> dict[str, Any]:
    """Writes SGLang's --config file (`api-key: "<value>"`, the value JSON-quoted, which YAML
    reads as the same string) from the Secret's file into a memory-backed volume."""
    script = ("import json, sys\n"
              "key = open(sys.argv[1]).read().strip()\n"
              "open(sys.argv[2], 'w').write('api-key: ' + json.dumps(key) + '\\n')\n")
    return {
        "name": "api-key-config",
        "image": req.image,
        "command": ["python3", "-c", script, f"{SECRET_MOUNT}/{API_KEY_KEY}", SGLANG_CONFIG],
        "volumeMounts": [{"name": "api-key", "mountPath": SECRET_MOUNT, "readOnly": True},
                         {"name": "sglang-config", "mountPath": CONFIG_DIR}],
    }


def api_key_volumes(req: K8sRequest) -> list[dict[str, Any]]:
    return [
        {"name": "api-key", "secret": {"secretName": req.secret_name, "defaultMode": 0o400,
                                       "items": [{"key": API_KEY_KEY, "path": API_KEY_KEY}]}},
        {"name": "sglang-config", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]


# -- the server container ---------------------------------------------------------------------
Role = Literal["single", "leader", "worker"]


def launch_command(req: K8sRequest, role: Role = "single") -> list[str]:
    """The profile's launch argv (Profile.launch_argv, as compose renders it), with the
    per-pod multi-node flags filled from LeaderWorkerSet's env and the API key by reference."""
    profile = req.profile
    if role == "single":
        argv = profile.launch_argv()
    else:
        # launch_args(): the flags the model source implies plus server.args, where the profile
        # has it (issue 13); server.args alone before that.
        launch_args = getattr(profile, "launch_args", None)
        all_args = launch_args() if callable(launch_args) else profile.server.args
        args = {k: v for k, v in all_args.items() if k not in MULTINODE_FLAGS}
        argv = profile.server.command + args_to_argv(args) + [
            "--nnodes", "$(LWS_GROUP_SIZE)", "--node-rank", "$(LWS_WORKER_INDEX)",
            "--dist-init-addr", f"$(LWS_LEADER_ADDRESS):{DIST_INIT_PORT}"]
    if has_api_key(profile):
        argv += ["--config", SGLANG_CONFIG]  # the key in a file, never in argv or env
    return argv


def probes(req: K8sRequest) -> dict[str, dict[str, Any]]:
    """From the profile's health section. startupProbe: failureThreshold x periodSeconds covers
    the whole start budget (model load, kernel compilation into an empty cache), then readiness
    and liveness on the health path; Kubernetes restarts a pod whose liveness fails."""
    health = req.profile.health
    port = "http"
    period = max(health.start_interval, 1)
    budget = health.budget_seconds()
    get = {"path": health.path, "port": port}
    return {
        "startupProbe": {"httpGet": dict(get), "periodSeconds": period, "timeoutSeconds": min(health.timeout, period),
                         "failureThreshold": math.ceil(budget / period)},
        "readinessProbe": {"httpGet": dict(get), "periodSeconds": health.interval, "timeoutSeconds": health.timeout,
                           "failureThreshold": health.retries},
        "livenessProbe": {"httpGet": dict(get), "periodSeconds": health.interval, "timeoutSeconds": health.timeout,
                          "failureThreshold": health.retries},
    }


def server_container(req: K8sRequest, role: Role = "single") -> dict[str, Any]:
    profile = req.profile
    container: dict[str, Any] = {
        "name": "server",
        "image": req.image,
        "command": launch_command(req, role),
        "env": [{"name": k, "value": v} for k, v in {**profile.server.env, **model_env(profile)}.items()]
               + secret_env(req),
        "ports": [{"name": "http", "containerPort": profile.server.port, "protocol": "TCP"}],
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "jit-cache", "mountPath": CACHE_MOUNT},
            {"name": "model", "mountPath": model_mount_path(profile), "readOnly": not hub_writable(profile)},
        ],
    }
    if has_api_key(profile):
        container["volumeMounts"].append({"name": "sglang-config", "mountPath": CONFIG_DIR, "readOnly": True})
    gpus = gpus_per_pod(profile)
    if gpus:
        container["resources"] = {"limits": {GPU_RESOURCE: gpus}}
    if role != "worker":  # a worker rank serves no HTTP: the group is judged by its leader
        container.update(probes(req))
    else:
        container.pop("ports")
    return container


def cache_init_container(req: K8sRequest) -> dict[str, Any]:
    """The Docker path's wipe rule on the node's cache folder: compare the stamp with the
    expected fingerprint (toolchain + this node's driver), wipe everything when they differ.
    The folder is already keyed by the toolchain, so this catches a driver change on the node."""
    expected = json.dumps({**req.toolchain, "gpu_products": gpu_products(req.profile)}, sort_keys=True)
    script = (
        'driver=$(sed -n "s/.*Kernel Module *\\([0-9.]*\\).*/\\1/p" /proc/driver/nvidia/version 2>/dev/null); '
        'want="$DEPLOYTOOL_FINGERPRINT driver=${driver:-none}"; '
        f'have=$(cat {CACHE_MOUNT}/{FINGERPRINT_FILE} 2>/dev/null || true); '
        'if [ "$have" != "$want" ]; then '
        f'echo "JIT cache: fingerprint differs, wiping {CACHE_MOUNT}"; find {CACHE_MOUNT} -mindepth 1 -delete; '
        f'printf "%s" "$want" > {CACHE_MOUNT}/{FINGERPRINT_FILE}; '
        'else echo "JIT cache: fingerprint unchanged, kept"; fi'
    )
    return {
        "name": "jit-cache-check",
        "image": req.image,
        "command": ["/bin/sh", "-c", script],
        "env": [{"name": "DEPLOYTOOL_FINGERPRINT", "value": expected}],
        "volumeMounts": [{"name": "jit-cache", "mountPath": CACHE_MOUNT}],
    }


def volumes(req: K8sRequest) -> list[dict[str, Any]]:
    """/dev/shm in memory at the profile's size; the JIT cache as a node folder named by the
    toolchain fingerprint (docs/kubernetes.md says why not a PVC); the weights read-only."""
    profile = req.profile
    model: dict[str, Any]
    if hub_repo(profile):
        # The node's hub cache, as the Docker path mounts the host's (issue 13's model.hub).
        model = {"name": "model", "hostPath": {"path": HUB_CACHE_HOST, "type": "DirectoryOrCreate"}}
    elif profile.model.host_path:
        model = {"name": "model", "hostPath": {"path": profile.model.host_path, "type": "Directory"}}
    else:
        model = {"name": "model", "persistentVolumeClaim": {"claimName": f"{req.app}-model", "readOnly": True}}
    return [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_quantity(profile.server.shm_size)}},
        {"name": "jit-cache", "hostPath": {"path": f"{CACHE_HOST_ROOT}/{fingerprint_key(req.toolchain)}",
                                           "type": "DirectoryOrCreate"}},
        model,
    ]


def scheduling(req: K8sRequest) -> dict[str, Any]:
    """Node selection: the profile's cards by the GPU product label, the user's selectors, and
    the taint GPU node pools commonly carry (nvidia.com/gpu) tolerated, plus the user's."""
    spec: dict[str, Any] = {}
    if req.node_selector:
        spec["nodeSelector"] = dict(req.node_selector)
    products = gpu_products(req.profile)
    if products and not req.profile.is_simulator:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": products}]}]}}}
    tolerations = [] if req.profile.is_simulator else [
        {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    tolerations += [t for t in req.tolerations if t not in tolerations]
    if tolerations:
        spec["tolerations"] = tolerations
    return spec


def pod_spec(req: K8sRequest, role: Role = "single") -> dict[str, Any]:
    init = [cache_init_container(req)]
    extra_volumes = []
    if has_api_key(req.profile):
        init.append(api_key_init_container(req))
        extra_volumes = api_key_volumes(req)
    return {
        "enableServiceLinks": False,  # no Docker-link env vars next to the server's own
        "terminationGracePeriodSeconds": 60,
        **scheduling(req),
        "initContainers": init,
        "containers": [server_container(req, role)],
        "volumes": volumes(req) + extra_volumes,
    }


def parse_node_selectors(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--node-selector {item!r}: expected KEY=VALUE, e.g. nvidia.com/gpu.count=8")
        out[key] = value
    return out


def parse_tolerations(items: list[str] | None) -> list[dict[str, Any]]:
    """KEY[=VALUE]:EFFECT, as kubectl taint writes them (no value: operator Exists)."""
    out = []
    for item in items or []:
        spec, sep, effect = item.rpartition(":")
        if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not spec:
            raise UsageError(f"--toleration {item!r}: expected KEY[=VALUE]:EFFECT with EFFECT one of "
                             "NoSchedule, PreferNoSchedule, NoExecute")
        key, has_value, value = spec.partition("=")
        toleration: dict[str, Any] = {"key": key, "operator": "Equal" if has_value else "Exists", "effect": effect}
        if has_value:
            toleration["value"] = value
        out.append(toleration)
    return out
