"""`deploytool k8s apply | status | rollback`: the rendered release through the Kubernetes API,
with the official `kubernetes` client (its configuration, kubeconfig contexts, auth and TLS).

apply:    every object of both stages is sent first as a server-side apply with dryRun=All
          (admission, schema and field validation by the cluster itself, nothing persisted);
          only when all pass: the stable workload gives one copy's GPUs to the canary
          (capacity minus one, as in a rolling update), the canary stage is applied, the
          qualify Job is waited for, and on success the release stage is applied and the
          canary removed. A failed Job removes the canary and restores the stable copy count:
          the previous release never stopped serving.
status:   the stable workload's release, image and readiness, the canary, the last qualify Job.
rollback: history.py. The REST calls themselves: cluster.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import DeployError
from . import release as rel
from .cluster import Cluster, ClusterError
from .history import prune_runtimes, record_release


# -- apply ------------------------------------------------------------------------------------
@dataclass
class ApplyResult:
    app: str
    namespace: str
    release: int
    flavor: str
    dry_run_ok: list[str] = field(default_factory=list)  # 'Kind/name' accepted by the server's dry run
    applied: list[str] = field(default_factory=list)
    qualification: str = "not run"  # passed | failed | timed out | not run
    promoted: bool = False
    message: str = ""


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def current_release(cluster: Cluster, stable_kind: tuple[str, str], namespace: str, app: str) -> int:
    obj = cluster.get(*stable_kind, namespace, app)
    if obj is None:
        return 0
    return int(obj["metadata"].get("annotations", {}).get(f"{rel.LABEL_DOMAIN}/release", "0"))


def stable_kind(flavor: str, kind: str) -> tuple[str, str]:
    if flavor == "ome":
        return ("ome.io/v1beta1", "InferenceService")
    return (
        ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet") if kind == "LeaderWorkerSet" else ("apps/v1", kind)
    )


def apply_release(
    cluster: Cluster,
    stages: dict[str, list[dict[str, Any]]],
    *,
    dry_run_only: bool = False,
    timeout_s: float = 8 * 3600,
    poll_s: float = 10.0,
    progress: Callable[[str], None] = lambda _m: None,
) -> ApplyResult:
    stable = stages["release"][-1]
    namespace = stable["metadata"]["namespace"]
    app = stable["metadata"]["name"]
    annotations = stable["metadata"]["annotations"]
    flavor = "ome" if stable["kind"] == "InferenceService" else "plain"
    result = ApplyResult(
        app=app, namespace=namespace, release=int(annotations[f"{rel.LABEL_DOMAIN}/release"]), flavor=flavor
    )
    everything = [obj for stage in ("canary", "release") for obj in stages[stage]]
    for obj in everything:  # the server's own dry run of every object before any is changed
        try:
            cluster.apply(obj, dry_run=True)
        except ClusterError as exc:
            raise DeployError(
                f"the cluster's dry run refused {_key(obj)}: {exc.message}",
                hint="nothing was changed; fix the input and apply again",
            ) from None
        result.dry_run_ok.append(_key(obj))
    progress(f"server-side dry run accepted {len(everything)} objects")
    if dry_run_only:
        result.message = "dry run only: nothing was changed"
        return result

    kind = (stable["apiVersion"], stable["kind"])
    job = next(o for o in stages["canary"] if o["kind"] == "Job")
    job_name = job["metadata"]["name"]
    # the NetworkPolicy fences the stable pods too: it stays after the canary goes
    canary_objects = [
        o
        for o in stages["canary"]
        if o["kind"] not in ("Job", "ClusterBaseModel", "ClusterServingRuntime", "NetworkPolicy")
    ]
    _remove_finished_job(
        cluster, namespace, job_name, timeout_s=min(timeout_s, 300), poll_s=poll_s, progress=progress
    )
    existing = cluster.get(*kind, namespace, app)
    restore: int | None = None
    promoted = False
    try:
        if existing is not None and flavor == "plain":
            replicas = int(existing.get("spec", {}).get("replicas", 1))
            if replicas > 1:  # the canary takes one copy's GPUs: capacity minus one, as a rollout step
                cluster.merge_patch(
                    *kind, namespace, app, {"spec": {"replicas": replicas - 1}}, dry_run=False
                )
                restore = replicas
                progress(
                    f"{stable['kind']} {app}: {replicas} -> {replicas - 1} copies while the canary is qualified"
                )
        for obj in stages["canary"]:
            cluster.apply(obj, dry_run=False)
            result.applied.append(_key(obj))
        progress(f"waiting for Job {job_name} (deploytool qualify against the canary)")
        result.qualification = _wait_for_job(cluster, namespace, job_name, timeout_s, poll_s)
        if result.qualification != "passed":
            result.message = (
                f"qualification {result.qualification}: release {result.release} not promoted; the "
                f"previous release keeps serving (Job {job_name} has the report in its log)"
            )
            raise DeployError(result.message)
        for obj in stages["release"]:
            cluster.apply(obj, dry_run=False)
            result.applied.append(_key(obj))
        promoted = True
    finally:
        # Whatever happened (a failed gate, an API error, Ctrl-C): no canary is left behind,
        # and a stable workload that lent a copy gets it back unless the release replaced it.
        for obj in canary_objects:
            cluster.delete(
                obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]
            )
        if restore is not None and not promoted:
            cluster.merge_patch(*kind, namespace, app, {"spec": {"replicas": restore}}, dry_run=False)
    if stable["kind"] == "LeaderWorkerSet":
        record_release(cluster, stable)
    if stable["kind"] == "InferenceService":
        prune_runtimes(cluster, stable)
    result.promoted = True
    result.message = (
        f"release {result.release} qualified and promoted; the rollout is the cluster's from here"
    )
    return result


def _remove_finished_job(
    cluster: Cluster,
    namespace: str,
    name: str,
    *,
    timeout_s: float,
    poll_s: float,
    progress: Callable[[str], None],
) -> None:
    """The same inputs qualified again: the earlier attempt's Job (finished) makes way."""
    job = cluster.get("batch/v1", "Job", namespace, name)
    if job is None:
        return
    status = job.get("status", {})
    if not (status.get("succeeded") or status.get("failed")):
        raise DeployError(
            f"Job {name} is still running: another `k8s apply` of this release is under way",
            hint="wait for it (`deploytool k8s status`), or delete the Job",
        )
    progress(f"removing the finished Job {name} of an earlier attempt")
    cluster.delete("batch/v1", "Job", namespace, name)
    deadline = time.monotonic() + timeout_s
    while cluster.get("batch/v1", "Job", namespace, name) is not None:
        if time.monotonic() >= deadline:
            raise DeployError(f"Job {name} of an earlier attempt was not removed within {timeout_s:.0f} s")
        time.sleep(poll_s)


def _wait_for_job(cluster: Cluster, namespace: str, name: str, timeout_s: float, poll_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        job = cluster.get("batch/v1", "Job", namespace, name) or {}
        status = job.get("status", {})
        if status.get("succeeded"):
            return "passed"
        if status.get("failed"):
            return "failed"
        if time.monotonic() >= deadline:
            return "timed out"
        time.sleep(poll_s)


# -- status -----------------------------------------------------------------------------------
def release_status(cluster: Cluster, *, namespace: str, app: str, kind: tuple[str, str]) -> dict[str, Any]:
    obj = cluster.get(*kind, namespace, app)
    out: dict[str, Any] = {"app": app, "namespace": namespace, "kind": kind[1], "exists": obj is not None}
    if obj is None:
        return out
    annotations = obj["metadata"].get("annotations", {})
    spec, status = obj.get("spec", {}), obj.get("status", {})
    out.update(
        {
            "release": annotations.get(f"{rel.LABEL_DOMAIN}/release"),
            "image": annotations.get(f"{rel.LABEL_DOMAIN}/image"),
            "profile": annotations.get(f"{rel.LABEL_DOMAIN}/profile"),
            "replicas": spec.get("replicas", spec.get("engine", {}).get("minReplicas")),
            "ready": status.get("readyReplicas"),
            "updated": status.get("updatedReplicas"),
            "conditions": {c.get("type"): c.get("status") for c in status.get("conditions", [])},
        }
    )
    out["canary"] = cluster.get(*kind, namespace, f"{app}-canary") is not None
    jobs = cluster.list("batch/v1", "Job", namespace, {"app.kubernetes.io/name": app})
    if jobs:
        last = max(
            jobs, key=lambda j: int(j["metadata"].get("labels", {}).get(f"{rel.LABEL_DOMAIN}/release", "0"))
        )
        st = last.get("status", {})
        out["last_qualification"] = {
            "job": last["metadata"]["name"],
            "verdict": "passed" if st.get("succeeded") else "failed" if st.get("failed") else "running",
        }
    return out
