"""The pod of a release: the server container (the profile's launch argv, env, probes, GPUs,
mounts), the init containers (the JIT cache rule, the API key's config file), the volumes,
node selection, and the Secret references.

Pure functions of a K8sRequest; nothing here talks to a cluster.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from ..profiles import Profile, args_to_argv
from ..release import secrets
from .release import (
    CACHE_HOST_ROOT,
    CACHE_MOUNT,
    DIST_INIT_PORT,
    FINGERPRINT_FILE,
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    HUB_CACHE_HOST,
    MULTINODE_FLAGS,
    K8sRequest,
    fingerprint_key,
    gpu_products,
    gpus_per_pod,
    hub_repo,
    hub_writable,
    model_env,
    model_mount_path,
    shm_quantity,
)

# -- secrets ----------------------------------------------------------------------------------
# The Secret `req.secret_name` (k8s apply --secret) holds the values; deploytool names it and
# never reads it. Which a release needs is what release/secrets.plan_secrets(profile) says
# for a Docker host (from `secrets.hf_token` and `server.api_key`), and the Secret's keys carry
# the Docker path's names: `hf_token` (the compose secret's name) and `api_key` (the profile field and
# release record key; on a Docker host it becomes the sglang_config and auth_header secrets,
# here the init container below writes the config file from it).
HF_TOKEN_KEY = "hf_token"  # nosec B105: the Secret's key name, never its value
API_KEY_KEY = "api_key"
# SGLang 0.5.23 has no environment variable for --api-key; `--config FILE.yaml` merges a YAML
# file of options into the command line (server_args.py prepare_server_args ->
# utils/server_args_config_parser.py), so the key reaches the server in a file, not in argv.
SECRET_MOUNT = "/run/secrets/deploytool"  # nosec B105: where the Secret is mounted, never its value
CONFIG_DIR = "/run/deploytool"
SGLANG_CONFIG = f"{CONFIG_DIR}/sglang-config.yaml"


def _planned(profile: Profile) -> set[str]:
    return {s.name for s in secrets.plan_secrets(profile)}


def needs_hf_token(profile: Profile) -> bool:
    return HF_TOKEN_KEY in _planned(profile)


def has_api_key(profile: Profile) -> bool:
    # plan_secrets turns server.api_key into SGLang's --config file (form "sglang-config").
    return any(s.form == "sglang-config" for s in secrets.plan_secrets(profile))


def secret_env(req: K8sRequest) -> list[dict[str, Any]]:
    """The hub token as a file, for a profile that says its weights need one (`secrets.hf_token`:
    gated weights) and for no other, read through HF_TOKEN_PATH as on a Docker host (the same
    path, secrets.HF_TOKEN_TARGET): a token in the environment is inherited by every process the
    server starts and shows in `kubectl describe`-style dumps of the environment; a file is read
    by the hub client alone. The manifest names the Secret, never holds the value."""
    if not needs_hf_token(req.profile):
        return []
    return [
        {"name": name, "value": value}
        for name, value in secrets.container_env(secrets.plan_secrets(req.profile)).items()
    ]


def hf_token_mounts(req: K8sRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the server's mount, the pod's volume) of the hub token file, or nothing."""
    if not needs_hf_token(req.profile):
        return [], []
    folder, name = secrets.HF_TOKEN_TARGET.rsplit("/", 1)
    volume = {
        "name": "hf-token",
        "secret": {
            "secretName": req.secret_name,
            "defaultMode": 0o400,
            "items": [{"key": HF_TOKEN_KEY, "path": name}],
        },
    }
    return [{"name": "hf-token", "mountPath": folder, "readOnly": True}], [volume]


# -- Pod Security Standards ------------------------------------------------------------------
# Every container meets the `restricted` profile's container rules: no privilege escalation,
# every capability dropped, the runtime's default seccomp filter. SGLang needs none of them:
# the GPUs come from the device plugin (device nodes, not capabilities), NCCL's shared memory is
# the /dev/shm emptyDir, and nothing in the server calls setuid or loads a kernel module.
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
# The pod-level rules. The exceptions, argued here, in docs/kubernetes.md ("Pod security") and in
# docs/security.md (with the alternatives weighed; tests/test_checkov.py lists each one):
# - runAsNonRoot is not set on the server's pods: the images (the CUDA bases and deploytool's
#   sim base) have no user but root, and the JIT cache and the hub cache are node folders the
#   kubelet creates root-owned (fsGroup does not apply to a hostPath); HOME=/root holds the
#   caches of packages not yet pointed under /cache. A non-root server needs those folders
#   re-owned on every node first: a migration, not a field here.
# - hostPath volumes: the weights (read-only unless a hub model downloads) and the JIT cache,
#   which survives pod restarts only on the node: an emptyDir (writable by any user) recompiles
#   every kernel at each start, and a ReadWriteOnce PVC ties every copy to one node. The cache
#   folder is the release's own (namespace, app, toolchain), so no other release's pods mount it.
# - readOnlyRootFilesystem is set on every container but the server: the init containers write
#   only into their volumes; the server writes outside its mounts (SGLang's IPC socket names come
#   from tempfile in /tmp, and each new kernel package brings a cache path of its own that
#   tests/test_gpu_image.py finds and CACHE_ENV points under /cache only afterwards), so a read-only
#   root would turn the next such path into a start that fails on the cluster alone.
POD_SECURITY: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}


# The init containers run a shell loop or a few lines of Python: bounded so that a runaway one
# cannot starve the node's other pods. The server's own container has no CPU or memory figures
# (docs/security.md): the profile says nothing of its host memory, which peaks while the weights
# stream through it at load, and a limit guessed too low kills a loading server; its cards are
# what it is scheduled by.
INIT_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "100m", "memory": "64Mi"},
    "limits": {"cpu": "1", "memory": "256Mi"},
}


def bounded(container: dict[str, Any], resources: dict[str, Any] = INIT_RESOURCES) -> dict[str, Any]:
    container["resources"] = json.loads(json.dumps(resources))  # a copy per container
    return container


def secured(container: dict[str, Any], *, read_only_root: bool = True) -> dict[str, Any]:
    context = json.loads(json.dumps(CONTAINER_SECURITY))  # a copy per container
    if read_only_root:
        context["readOnlyRootFilesystem"] = True
    container["securityContext"] = context
    return container


def pod_security_fields() -> dict[str, Any]:
    """The pod-level settings every server pod carries, in both flavours (OME's runtime takes
    them as the engine's pod fields)."""
    return {
        "enableServiceLinks": False,  # no Docker-link env vars next to the server's own
        # the server never calls the Kubernetes API: no token in its file system to steal
        "automountServiceAccountToken": False,
        "securityContext": json.loads(json.dumps(POD_SECURITY)),
    }


API_KEY_FILE = f"{SECRET_MOUNT}/{API_KEY_KEY}"


def api_key_file_mount(
    req: K8sRequest, *, group: int | None = None
) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
    """For the qualify Job, which sends the key: (its `--api-key-file` argument, its mount, the
    pod's volume), or nothing. A file rather than the environment, as for the server: the key
    reaches deploytool alone. `group`: the pod's fsGroup, which may read the file (0440)."""
    if not has_api_key(req.profile):
        return [], [], []
    volume = {
        "name": "api-key",
        "secret": {
            "secretName": req.secret_name,
            "defaultMode": 0o440 if group else 0o400,
            "items": [{"key": API_KEY_KEY, "path": API_KEY_KEY}],
        },
    }
    return (
        ["--api-key-file", API_KEY_FILE],
        [{"name": "api-key", "mountPath": SECRET_MOUNT, "readOnly": True}],
        [volume],
    )


def api_key_init_container(req: K8sRequest) -> dict[str, Any]:
    """Writes SGLang's --config file (`api-key: "<value>"`, the value JSON-quoted, which YAML
    reads as the same string) from the Secret's file into a memory-backed volume."""
    script = (
        "import json, sys\n"
        "key = open(sys.argv[1]).read().strip()\n"
        "open(sys.argv[2], 'w').write('api-key: ' + json.dumps(key) + '\\n')\n"
    )
    return bounded(
        secured(
            {
                "name": "api-key-config",
                "image": req.image,
                "command": ["python3", "-c", script, f"{SECRET_MOUNT}/{API_KEY_KEY}", SGLANG_CONFIG],
                "volumeMounts": [
                    {"name": "api-key", "mountPath": SECRET_MOUNT, "readOnly": True},
                    {"name": "sglang-config", "mountPath": CONFIG_DIR},
                ],
            }
        )
    )


def api_key_volumes(req: K8sRequest) -> list[dict[str, Any]]:
    return [
        {
            "name": "api-key",
            "secret": {
                "secretName": req.secret_name,
                "defaultMode": 0o400,
                "items": [{"key": API_KEY_KEY, "path": API_KEY_KEY}],
            },
        },
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
        # launch_args(): the flags the model source implies, then server.args (as launch_argv)
        args = {k: v for k, v in profile.launch_args().items() if k not in MULTINODE_FLAGS}
        argv = (
            profile.server.command
            + args_to_argv(args)
            + [
                "--nnodes",
                "$(LWS_GROUP_SIZE)",
                "--node-rank",
                "$(LWS_WORKER_INDEX)",
                "--dist-init-addr",
                f"$(LWS_LEADER_ADDRESS):{DIST_INIT_PORT}",
            ]
        )
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
        "startupProbe": {
            "httpGet": dict(get),
            "periodSeconds": period,
            "timeoutSeconds": min(health.timeout, period),
            "failureThreshold": math.ceil(budget / period),
        },
        "readinessProbe": {
            "httpGet": dict(get),
            "periodSeconds": health.interval,
            "timeoutSeconds": health.timeout,
            "failureThreshold": health.retries,
        },
        "livenessProbe": {
            "httpGet": dict(get),
            "periodSeconds": health.interval,
            "timeoutSeconds": health.timeout,
            "failureThreshold": health.retries,
        },
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
            {"name": "dshm", "mountPath": "/dev/shm"},  # nosec B108: the pod's /dev/shm mount point
            {"name": "jit-cache", "mountPath": CACHE_MOUNT},
            {"name": "model", "mountPath": model_mount_path(profile), "readOnly": not hub_writable(profile)},
        ],
    }
    if has_api_key(profile):
        container["volumeMounts"].append({"name": "sglang-config", "mountPath": CONFIG_DIR, "readOnly": True})
    container["volumeMounts"] += hf_token_mounts(req)[0]
    secured(container, read_only_root=False)  # POD_SECURITY's comment says why
    gpus = gpus_per_pod(profile)
    if gpus:
        # a quantity in its canonical form, a string: the API takes a number too, the
        # official client's model (V1ResourceRequirements) only a string
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
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
        f"have=$(cat {CACHE_MOUNT}/{FINGERPRINT_FILE} 2>/dev/null || true); "
        'if [ "$have" != "$want" ]; then '
        f'echo "JIT cache: fingerprint differs, wiping {CACHE_MOUNT}"; find {CACHE_MOUNT} -mindepth 1 -delete; '
        f'printf "%s" "$want" > {CACHE_MOUNT}/{FINGERPRINT_FILE}; '
        'else echo "JIT cache: fingerprint unchanged, kept"; fi'
    )
    return bounded(
        secured(
            {
                "name": "jit-cache-check",
                "image": req.image,
                "command": ["/bin/sh", "-c", script],
                "env": [{"name": "DEPLOYTOOL_FINGERPRINT", "value": expected}],
                "volumeMounts": [{"name": "jit-cache", "mountPath": CACHE_MOUNT}],
            }
        )
    )


def volumes(req: K8sRequest) -> list[dict[str, Any]]:
    """/dev/shm in memory at the profile's size; the JIT cache as a node folder named by the
    toolchain fingerprint (docs/kubernetes.md says why not a PVC); the weights read-only."""
    profile = req.profile
    model: dict[str, Any]
    if hub_repo(profile):
        # The node's hub cache, as the Docker path mounts the host's (the profile's model.hub).
        model = {"name": "model", "hostPath": {"path": HUB_CACHE_HOST, "type": "DirectoryOrCreate"}}
    elif profile.model.host_path:
        model = {"name": "model", "hostPath": {"path": profile.model.host_path, "type": "Directory"}}
    else:
        model = {
            "name": "model",
            "persistentVolumeClaim": {"claimName": f"{req.app}-model", "readOnly": True},
        }
    return [
        {
            "name": "dshm",
            "emptyDir": {"medium": "Memory", "sizeLimit": shm_quantity(profile.server.shm_size)},
        },
        {"name": "jit-cache", "hostPath": {"path": jit_cache_folder(req), "type": "DirectoryOrCreate"}},
        model,
    ]


def jit_cache_folder(req: K8sRequest) -> str:
    """The node folder of this release's kernel cache: its namespace and app (no other release's
    pods mount it, so none can plant a kernel this one loads), then the toolchain (a new one
    never reuses the old kernels)."""
    return f"{CACHE_HOST_ROOT}/{req.namespace}/{req.app}/{fingerprint_key(req.toolchain)}"


def scheduling(req: K8sRequest) -> dict[str, Any]:
    """Node selection: the profile's cards by the GPU product label, the user's selectors, and
    the taint GPU node pools commonly carry (nvidia.com/gpu) tolerated, plus the user's."""
    spec: dict[str, Any] = {}
    if req.node_selector:
        spec["nodeSelector"] = dict(req.node_selector)
    products = gpu_products(req.profile)
    if products and not req.profile.is_simulator:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": products}
                            ]
                        }
                    ]
                }
            }
        }
    tolerations = (
        []
        if req.profile.is_simulator
        else [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    )
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
    extra_volumes += hf_token_mounts(req)[1]
    return {
        **pod_security_fields(),
        "terminationGracePeriodSeconds": 60,
        **scheduling(req),
        "initContainers": init,
        "containers": [server_container(req, role)],
        "volumes": volumes(req) + extra_volumes,
    }
