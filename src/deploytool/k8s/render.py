"""`deploytool render --k8s`: one release as Kubernetes objects (the plain flavour).

Two stages, applied in order by `deploytool k8s apply` (or by hand, docs/kubernetes.md):

  canary   the new release as ONE serving copy that no Service sends traffic to
           (track=canary), its own ClusterIP Service, and a Job running `deploytool qualify`
           against it: qualification before traffic.
  release  the stable workload (Deployment, or LeaderWorkerSet when one copy spans nodes)
           updated to the new release by a rolling update that never drops below capacity
           minus one, the Service users reach (track=stable only), a PodDisruptionBudget.

Pure: (K8sRequest) -> lists of dicts; validate.py checks them against the schemas.
"""

from __future__ import annotations

import copy
from typing import Any

from ..yamlio import dump_yaml
from . import pod
from . import release as rel
from .network import GATEWAY_LABEL, network_policy, qualify_policy  # noqa: F401 (GATEWAY_LABEL: where callers found it)
from .ome import render_ome_stages
from .qualify_job import qualify_job
from .release import K8sRequest, Track

LWS_API = "leaderworkerset.x-k8s.io/v1"
# Pod labels lws sets (api/leaderworkerset/v1/leaderworkerset_types.go in kubernetes-sigs/lws).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def _rollout() -> dict[str, Any]:
    # One model copy per GPU set: no spare cards to surge into, so replace one at a time.
    return {"maxUnavailable": 1, "maxSurge": 0}


def workload(req: K8sRequest, track: Track = "stable") -> dict[str, Any]:
    """The Deployment (one node per copy) or LeaderWorkerSet (a copy spans nodes)."""
    name = req.app if track == "stable" else f"{req.app}-canary"
    replicas = req.replicas if track == "stable" else 1
    template_meta = {"labels": rel.labels(req, track), "annotations": rel.release_annotations(req)}
    budget = req.profile.health.budget_seconds()
    if rel.workload_kind(req.profile) == "Deployment":
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": rel.metadata(req, name, track),
            "spec": {
                "replicas": replicas,
                "revisionHistoryLimit": req.retention,  # the old ReplicaSets `k8s rollback` returns to
                "progressDeadlineSeconds": budget + 300,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": _rollout()},
                "selector": {"matchLabels": rel.selector(req, track)},
                "template": {"metadata": template_meta, "spec": pod.pod_spec(req, "single")},
            },
        }
    leader_meta = copy.deepcopy(template_meta)
    leader_meta["labels"][f"{rel.LABEL_DOMAIN}/role"] = "leader"
    worker_meta = copy.deepcopy(template_meta)
    worker_meta["labels"][f"{rel.LABEL_DOMAIN}/role"] = "worker"
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": rel.metadata(req, name, track),
        "spec": {
            "replicas": replicas,
            # The leader serves HTTP only once every rank joined: start the group together.
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": _rollout()},
            "leaderWorkerTemplate": {
                "size": rel.nodes(req.profile),
                # One rank lost is the whole copy lost: recreate the group together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": {"metadata": leader_meta, "spec": pod.pod_spec(req, "leader")},
                "workerTemplate": {"metadata": worker_meta, "spec": pod.pod_spec(req, "worker")},
            },
        },
    }


def _pod_selector(req: K8sRequest, track: Track) -> dict[str, str]:
    selector = rel.selector(req, track)
    if rel.workload_kind(req.profile) == "LeaderWorkerSet":
        selector[LWS_WORKER_INDEX_LABEL] = "0"  # the leader rank serves the HTTP API
    return selector


def service(req: K8sRequest, track: Track = "stable") -> dict[str, Any]:
    name = req.app if track == "stable" else f"{req.app}-canary"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": rel.metadata(req, name, track),
        "spec": {
            "type": "ClusterIP",
            "selector": _pod_selector(req, track),
            "ports": [
                {"name": "http", "port": req.profile.server.port, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }


def disruption_budget(req: K8sRequest) -> dict[str, Any]:
    """Voluntary disruptions (node drains) take one copy at a time, like the rollout."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": rel.metadata(req, req.app),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": rel.selector(req, "stable")}},
    }


def render_stages(req: K8sRequest) -> dict[str, list[dict[str, Any]]]:
    """{'canary': [...], 'release': [...]}, in the order `k8s apply` applies them."""
    if req.flavor == "ome":
        return render_ome_stages(req)
    return {
        # the policy with the canary, which loads for minutes before it answers: fenced before it
        # serves, and it stays for the stable pods (k8s apply removes the canary, not the policy)
        "canary": [
            workload(req, "canary"),
            service(req, "canary"),
            qualify_job(req),
            network_policy(req),
            qualify_policy(req),
        ],
        "release": [service(req, "stable"), disruption_budget(req), workload(req, "stable")],
    }


def render_manifests(req: K8sRequest) -> list[dict[str, Any]]:
    stages = render_stages(req)
    return [obj for stage in stages.values() for obj in stage]


def stages_text(req: K8sRequest) -> dict[str, str]:
    """Each stage as one multi-document YAML file, with a header saying what it is."""
    out = {}
    for stage, objects in render_stages(req).items():
        header = (
            f"# Rendered by deploytool for profile {req.profile.name}, release {req.release}, "
            f"flavour {req.flavor}: stage '{stage}'.\n"
            "# Do not edit: re-render with `deploytool render --k8s`; docs/kubernetes.md says the order.\n"
        )
        out[stage] = header + "---\n".join(dump_yaml(obj) for obj in objects)
    return out
