"""`deploytool k8s rollback` and the history it returns to.

Deployment:       the newest older ReplicaSet's pod template (what `kubectl rollout undo` does);
                  the cluster keeps revisionHistoryLimit (= retention) of them.
InferenceService: the previous release's ClusterServingRuntime (one per release; the ones
                  older than the retention count are removed after a promotion).
LeaderWorkerSet:  the previous release's manifest, recorded by deploytool (lws keeps none).
Each is sent as a server-side dry run first.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import DeployError
from . import release as rel
from .cluster import Cluster

# -- rollback ---------------------------------------------------------------------------------
REVISION = "deployment.kubernetes.io/revision"


def rollback_plan(
    cluster: Cluster, *, namespace: str, app: str, kind: tuple[str, str]
) -> tuple[dict[str, Any], str]:
    """(merge patch, what it does). Deployment: the pod template of the newest ReplicaSet older
    than the current one. InferenceService: the previous release's ClusterServingRuntime."""
    obj = cluster.get(*kind, namespace, app)
    if obj is None:
        raise DeployError(f"{kind[1]} {app} does not exist in namespace {namespace}: nothing to roll back")
    annotations = obj["metadata"].get("annotations", {})
    current = int(annotations.get(f"{rel.LABEL_DOMAIN}/release", "0"))
    if kind[1] == "Deployment":
        selector = obj["spec"]["selector"]["matchLabels"]
        sets = cluster.list("apps/v1", "ReplicaSet", namespace, selector)
        revision = int(annotations.get(REVISION, "0"))
        older = sorted(
            (rs for rs in sets if int(rs["metadata"].get("annotations", {}).get(REVISION, "0")) < revision),
            key=lambda rs: int(rs["metadata"]["annotations"][REVISION]),
        )
        if not older:
            raise DeployError(
                f"Deployment {app} has no older revision to roll back to (revisionHistoryLimit keeps "
                "the last releases; none is left)"
            )
        template = json.loads(json.dumps(older[-1]["spec"]["template"]))
        template.get("metadata", {}).get("labels", {}).pop("pod-template-hash", None)
        target = template.get("metadata", {}).get("annotations", {})
        patch = {
            "metadata": {"annotations": {k: v for k, v in target.items() if k.startswith(rel.LABEL_DOMAIN)}},
            "spec": {"template": template},
        }
        return patch, (
            f"Deployment {app}: release {current} -> release "
            f"{target.get(f'{rel.LABEL_DOMAIN}/release', '?')} (revision {older[-1]['metadata']['annotations'][REVISION]})"
        )
    if kind[1] == "InferenceService":
        previous = None
        for number in range(current - 1, 0, -1):
            runtime = cluster.get("ome.io/v1beta1", "ClusterServingRuntime", None, f"{app}-r{number}")
            if runtime is not None:
                previous = runtime
                break
        if previous is None:
            raise DeployError(
                f"InferenceService {app}: no ClusterServingRuntime of an earlier release is left"
            )
        target = previous["metadata"].get("annotations", {})
        patch = {
            "metadata": {"annotations": {k: v for k, v in target.items() if k.startswith(rel.LABEL_DOMAIN)}},
            "spec": {"runtime": {"name": previous["metadata"]["name"]}},
        }
        return patch, f"InferenceService {app}: runtime {app}-r{current} -> {previous['metadata']['name']}"
    raise DeployError(f"rollback of a {kind[1]} is not supported")


def rollback(
    cluster: Cluster, *, namespace: str, app: str, kind: tuple[str, str], dry_run_only: bool = False
) -> dict[str, Any]:
    if kind[1] == "LeaderWorkerSet":
        manifest, what = _lws_rollback_target(cluster, namespace=namespace, app=app)
        cluster.apply(manifest, dry_run=True)
        if not dry_run_only:
            cluster.apply(manifest, dry_run=False)
    else:
        patch, what = rollback_plan(cluster, namespace=namespace, app=app, kind=kind)
        cluster.merge_patch(*kind, namespace, app, patch, dry_run=True)
        if not dry_run_only:
            cluster.merge_patch(*kind, namespace, app, patch, dry_run=False)
    if dry_run_only:
        return {
            "app": app,
            "namespace": namespace,
            "rolled_back": False,
            "plan": what,
            "message": "dry run only",
        }
    return {
        "app": app,
        "namespace": namespace,
        "rolled_back": True,
        "plan": what,
        "message": "the cluster rolls the pods back (maxUnavailable 1, maxSurge 0)",
    }


# -- LeaderWorkerSet history ------------------------------------------------------------------
# lws deletes every ControllerRevision but the current one once a rollout finishes
# (pkg/utils/revision TruncateRevisions in kubernetes-sigs/lws), so the cluster keeps no
# previous release to return to. deploytool keeps the manifests it applied, one ConfigMap per
# release (no Secret values are in them: credentials are references), `retention` of them.
HISTORY_LABEL = f"{rel.LABEL_DOMAIN}/history-of"


def record_release(cluster: Cluster, manifest: dict[str, Any]) -> None:
    meta = manifest["metadata"]
    release = meta["annotations"][f"{rel.LABEL_DOMAIN}/release"]
    retention = int(meta["annotations"].get(f"{rel.LABEL_DOMAIN}/retention", rel.DEFAULT_RETENTION))
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{meta['name']}-release-{release}",
            "namespace": meta["namespace"],
            "labels": {
                HISTORY_LABEL: meta["name"],
                f"{rel.LABEL_DOMAIN}/release": release,
                "app.kubernetes.io/managed-by": "deploytool",
            },
        },
        "data": {"manifest.json": json.dumps(manifest, sort_keys=True)},
    }
    cluster.apply(config_map, dry_run=False)
    kept = sorted(
        cluster.list("v1", "ConfigMap", meta["namespace"], {HISTORY_LABEL: meta["name"]}),
        key=lambda c: int(c["metadata"]["labels"][f"{rel.LABEL_DOMAIN}/release"]),
        reverse=True,
    )
    for old in kept[retention + 1 :]:  # the current release and `retention` before it
        cluster.delete("v1", "ConfigMap", meta["namespace"], old["metadata"]["name"])


def prune_runtimes(cluster: Cluster, isvc: dict[str, Any]) -> list[str]:
    """OME: one ClusterServingRuntime per release is the history; keep the current one and
    `retention` before it, remove older ones (no InferenceService of this app points at them)."""
    annotations = isvc["metadata"]["annotations"]
    current = int(annotations[f"{rel.LABEL_DOMAIN}/release"])
    retention = int(annotations.get(f"{rel.LABEL_DOMAIN}/retention", rel.DEFAULT_RETENTION))
    runtimes = cluster.list(
        "ome.io/v1beta1", "ClusterServingRuntime", None, {"app.kubernetes.io/name": isvc["metadata"]["name"]}
    )
    removed = []
    for runtime in runtimes:
        number = int(runtime["metadata"].get("labels", {}).get(f"{rel.LABEL_DOMAIN}/release", current))
        if number < current - retention:
            cluster.delete("ome.io/v1beta1", "ClusterServingRuntime", None, runtime["metadata"]["name"])
            removed.append(runtime["metadata"]["name"])
    return removed


def _lws_rollback_target(cluster: Cluster, *, namespace: str, app: str) -> tuple[dict[str, Any], str]:
    obj = cluster.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", namespace, app)
    if obj is None:
        raise DeployError(
            f"LeaderWorkerSet {app} does not exist in namespace {namespace}: nothing to roll back"
        )
    current = int(obj["metadata"].get("annotations", {}).get(f"{rel.LABEL_DOMAIN}/release", "0"))
    history = [
        c
        for c in cluster.list("v1", "ConfigMap", namespace, {HISTORY_LABEL: app})
        if int(c["metadata"]["labels"][f"{rel.LABEL_DOMAIN}/release"]) < current
    ]
    if not history:
        raise DeployError(
            f"LeaderWorkerSet {app}: no earlier release recorded (deploytool keeps the manifests "
            "of the releases it promoted, `retention` of them)"
        )
    previous = max(history, key=lambda c: int(c["metadata"]["labels"][f"{rel.LABEL_DOMAIN}/release"]))
    manifest = json.loads(previous["data"]["manifest.json"])
    release = previous["metadata"]["labels"][f"{rel.LABEL_DOMAIN}/release"]
    return manifest, (
        f"LeaderWorkerSet {app}: release {current} -> release {release} "
        "(its recorded manifest, server-side applied)"
    )
