"""`deploytool render --k8s --k8s-flavor ome`: the release as OME resources (SGLang's own
operator, Open Model Engine, API group ome.io/v1beta1).

  ClusterBaseModel       <app>          the weights: source URI, node path, download placement
  ClusterServingRuntime  <app>-r<N>     the launch: image by digest, the profile's flags, GPU
                                        count, probes, /dev/shm, the JIT cache; one per release,
                                        never edited, so rolling back is pointing back at one
  InferenceService       <app>-canary   stage 'canary': one copy of the new runtime, no users,
                                        qualified by the same Job as the plain flavour
  InferenceService       <app>          stage 'release': the serving one, moved to the new runtime

OME then owns the rollout (its Deployment or LeaderWorkerSet, the Service, scaling); deploytool
adds qualification before traffic and the JIT cache rule. Field names follow OME's published
CRDs (config/crd/full/ome.io_*.yaml of github.com/sgl-project/ome); the tests validate against them.
"""

from __future__ import annotations

import copy
from typing import Any

from . import pod
from . import release as rel
from .network import network_policy, qualify_policy
from .qualify_job import canary_url, qualify_job
from .release import K8sRequest, Track

OME_API = "ome.io/v1beta1"
# OME names an InferenceService's engine Service '<name>-engine' (pkg/constants/constants.go,
# EngineServiceName) and serves it on port 80 (CommonDefaultHttpPort).
ENGINE_SERVICE_SUFFIX = "-engine"
ENGINE_SERVICE_PORT = 80
MODELS_HOST_ROOT = "/var/lib/deploytool/models"


def runtime_name(req: K8sRequest) -> str:
    return f"{req.app}-r{req.release}"


def model_source(req: K8sRequest) -> dict[str, Any]:
    """storage of the ClusterBaseModel: the hub id when the profile has one (model.hub),
    else the node folder the Docker path mounts (model.host_path), else a PVC the operator made."""
    model = req.profile.model
    # path: where the weights are on a node (OME's model agent downloads there, the engine mounts it)
    storage: dict[str, Any] = {"path": model.host_path or f"{MODELS_HOST_ROOT}/{req.app}"}
    if model.hub:
        storage["storageUri"] = f"hf://{model.hub}"
        # OME's model agent reads the hub token from this Secret, for a ClusterBaseModel in the
        # `ome` namespace, under parameters.secretKey (default "token"): pkg/modelagent/gopher.go.
        storage["key"] = req.secret_name
        storage["parameters"] = {"secretKey": pod.HF_TOKEN_KEY}
        if model.revision:
            storage["parameters"]["revision"] = str(model.revision)
    elif model.host_path:
        storage["storageUri"] = f"local://{model.host_path}"
    else:
        storage["storageUri"] = f"pvc://{req.namespace}:{req.app}-model/"
    products = rel.gpu_products(req.profile)
    if products and not req.profile.is_simulator:
        # Weights land only on nodes that can serve them.
        storage["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": rel.GPU_PRODUCT_LABEL, "operator": "In", "values": products}
                        ]
                    }
                ]
            }
        }
    return storage


def base_model(req: K8sRequest) -> dict[str, Any]:
    capabilities = ["TEXT_TO_TEXT"] + (["IMAGE_TEXT_TO_TEXT"] if req.profile.model.vision else [])
    return {
        "apiVersion": OME_API,
        "kind": "ClusterBaseModel",
        "metadata": rel.metadata(req, req.app, namespaced=False),
        "spec": {
            "displayName": req.profile.model.served_name,
            "disabled": False,
            "modelCapabilities": capabilities,
            "storage": model_source(req),
        },
    }


def _runner(req: K8sRequest, role: pod.Role) -> dict[str, Any]:
    """The server container as OME's runner: OME mounts the weights and sets MODEL_PATH, so the
    profile's --model-path points there; everything else is the profile's argv unchanged."""
    container = pod.server_container(req, role)
    container["name"] = "ome-container"
    command = container["command"]
    if "--model-path" in command:
        command[command.index("--model-path") + 1] = "$(MODEL_PATH)"
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "model"]
    return container


def _pod_fields(req: K8sRequest, role: pod.Role) -> dict[str, Any]:
    spec = pod.pod_spec(req, role)
    return {
        # the plain flavour's pod-level settings too: OME builds the pods from these fields
        **{k: spec[k] for k in (*pod.pod_security_fields(), "terminationGracePeriodSeconds") if k in spec},
        **{k: spec[k] for k in ("nodeSelector", "affinity", "tolerations") if k in spec},
        "initContainers": spec["initContainers"],
        "volumes": [v for v in spec["volumes"] if v["name"] != "model"],
        "runner": _runner(req, role),
    }


def serving_runtime(req: K8sRequest) -> dict[str, Any]:
    engine: dict[str, Any] = {"annotations": rel.release_annotations(req), "labels": rel.labels(req)}
    if rel.nodes(req.profile) > 1:
        # OME runs a multi-node engine as a LeaderWorkerSet: worker.size counts the workers,
        # the leader excluded (config/runtimes/srt/deepseek-rdma-rt.yaml in OME).
        engine["leader"] = _pod_fields(req, "leader")
        engine["worker"] = {"size": rel.nodes(req.profile) - 1, **_pod_fields(req, "worker")}
    else:
        engine.update(_pod_fields(req, "single"))
    quantization = req.profile.server.args.get("quantization")
    model_format: dict[str, Any] = {
        "modelFormat": {"name": "safetensors"},
        "modelFramework": {"name": "transformers"},
        "autoSelect": False,  # the InferenceService names this runtime; OME never picks it for others
        "priority": 1,
    }
    if isinstance(quantization, str):
        model_format["quantization"] = quantization
    return {
        "apiVersion": OME_API,
        "kind": "ClusterServingRuntime",
        "metadata": rel.metadata(req, runtime_name(req), namespaced=False),
        "spec": {
            "disabled": False,
            "supportedModelFormats": [model_format],
            "protocolVersions": ["openAI"],
            "engineConfig": engine,
        },
    }


def inference_service(req: K8sRequest, track: Track = "stable") -> dict[str, Any]:
    name = req.app if track == "stable" else f"{req.app}-canary"
    replicas = req.replicas if track == "stable" else 1
    return {
        "apiVersion": OME_API,
        "kind": "InferenceService",
        "metadata": rel.metadata(req, name, track),
        "spec": {
            "model": {"name": req.app, "kind": "ClusterBaseModel"},
            "runtime": {"name": runtime_name(req), "kind": "ClusterServingRuntime"},
            "engine": {
                "minReplicas": replicas,
                "maxReplicas": replicas,
                # The same rollout rule as the plain flavour, carried by OME's Deployment.
                "deploymentStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
                },
                "labels": rel.labels(req, track),
                "annotations": rel.release_annotations(req),
            },
        },
    }


def render_ome_stages(req: K8sRequest) -> dict[str, list[dict[str, Any]]]:
    canary = inference_service(req, "canary")
    url = canary_url(
        req,
        host=f"{canary['metadata']['name']}{ENGINE_SERVICE_SUFFIX}.{req.namespace}.svc",
        port=ENGINE_SERVICE_PORT,
    )
    return {
        # the plain flavour's NetworkPolicy, by port number: OME builds the pods and their ports
        "canary": [
            base_model(req),
            serving_runtime(req),
            canary,
            qualify_job(req, url=url),
            network_policy(req, port=req.profile.server.port),
            qualify_policy(req),
        ],
        "release": [copy.deepcopy(inference_service(req, "stable"))],
    }
