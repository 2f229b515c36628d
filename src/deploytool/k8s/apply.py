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
rollback: history.py.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import DeployError, DeploytoolError, EngineUnavailable
from . import release as rel
from .history import prune_runtimes, record_release

FIELD_MANAGER = "deploytool"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"

# (apiVersion, kind) -> (plural, namespaced)
RESOURCES: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "Service"): ("services", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("apps/v1", "Deployment"): ("deployments", True),
    ("apps/v1", "ReplicaSet"): ("replicasets", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("policy/v1", "PodDisruptionBudget"): ("poddisruptionbudgets", True),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): ("leaderworkersets", True),
    ("ome.io/v1beta1", "InferenceService"): ("inferenceservices", True),
    ("ome.io/v1beta1", "ClusterServingRuntime"): ("clusterservingruntimes", False),
    ("ome.io/v1beta1", "ClusterBaseModel"): ("clusterbasemodels", False),
}


class ClusterError(DeploytoolError):
    def __init__(self, status: int, message: str, *, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.status = status


def resource_path(api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
    plural, namespaced = RESOURCES[(api_version, kind)]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespaced:
        base += f"/namespaces/{namespace}"
    return f"{base}/{plural}" + (f"/{name}" if name else "")


class Cluster:
    """The few REST calls deploytool makes, through the official client's ApiClient."""

    def __init__(self, api_client: Any):
        self.api = api_client

    def _call(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
              body: Any = None, content_type: str | None = None) -> Any:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        method, url, headers, body, post = self.api.param_serialize(
            method=method, resource_path=path, query_params=query or [], header_params=headers, body=body,
            auth_settings=["BearerToken"])
        try:
            response = self.api.call_api(method, url, header_params=headers, body=body, post_params=post,
                                         _request_timeout=60)
        except Exception as exc:  # urllib3 connection errors, TLS: no cluster answered
            raise EngineUnavailable(f"the Kubernetes API at {self.api.configuration.host} did not answer: {exc}",
                                    hint="check --context and `kubectl cluster-info`") from None
        response.read()
        data = json.loads(response.data) if response.data else None
        if response.status >= 300:
            message = data.get("message") if isinstance(data, dict) else str(data)
            raise ClusterError(response.status, f"{method} {path}: {response.status} {message}")
        return data

    def apply(self, obj: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
        meta = obj["metadata"]
        query = [("fieldManager", FIELD_MANAGER), ("force", "true"), ("fieldValidation", "Strict")]
        if dry_run:
            query.insert(0, ("dryRun", "All"))
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        return self._call("PATCH", path, query=query, body=obj, content_type=APPLY_PATCH)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", resource_path(api_version, kind, namespace, name))
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None, selector: dict[str, str]) -> list[dict[str, Any]]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in selector.items()))]
        return self._call("GET", resource_path(api_version, kind, namespace), query=query).get("items", [])

    def merge_patch(self, api_version: str, kind: str, namespace: str | None, name: str, patch: dict[str, Any],
                    *, dry_run: bool) -> dict[str, Any]:
        query = [("dryRun", "All")] if dry_run else []
        return self._call("PATCH", resource_path(api_version, kind, namespace, name), query=query, body=patch,
                          content_type=MERGE_PATCH)

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        try:
            self._call("DELETE", resource_path(api_version, kind, namespace, name),
                       body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"})
        except ClusterError as exc:
            if exc.status != 404:
                raise


def connect(context: str | None = None) -> Cluster:
    """A kubeconfig context (or the in-cluster service account when there is no kubeconfig)."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    # Read KUBECONFIG now, not when the client was imported (it may list several files).
    kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        api_client = config.new_client_from_config(config_file=kubeconfig, context=context)
    except (ConfigException, FileNotFoundError, TypeError) as exc:
        if context is None:
            try:
                config.load_incluster_config()
                from kubernetes.client import ApiClient

                return Cluster(ApiClient())
            except ConfigException:
                pass
        raise EngineUnavailable(f"no Kubernetes cluster configured: {exc}",
                                hint="set KUBECONFIG or pass --context NAME (kubectl config get-contexts)") from None
    return Cluster(api_client)


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
    return ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet") if kind == "LeaderWorkerSet" else ("apps/v1", kind)


def apply_release(cluster: Cluster, stages: dict[str, list[dict[str, Any]]], *, dry_run_only: bool = False,
                  timeout_s: float = 8 * 3600, poll_s: float = 10.0,
                  progress: Callable[[str], None] = lambda _m: None) -> ApplyResult:
    stable = stages["release"][-1]
    namespace = stable["metadata"]["namespace"]
    app = stable["metadata"]["name"]
    annotations = stable["metadata"]["annotations"]
    flavor = "ome" if stable["kind"] == "InferenceService" else "plain"
    result = ApplyResult(app=app, namespace=namespace, release=int(annotations[f"{rel.LABEL_DOMAIN}/release"]),
                         flavor=flavor)
    everything = [obj for stage in ("canary", "release") for obj in stages[stage]]
    for obj in everything:  # the server's own dry run of every object before any is changed
        try:
            cluster.apply(obj, dry_run=True)
        except ClusterError as exc:
            raise DeployError(f"the cluster's dry run refused {_key(obj)}: {exc.message}",
                              hint="nothing was changed; fix the input and apply again") from None
        result.dry_run_ok.append(_key(obj))
    progress(f"server-side dry run accepted {len(everything)} objects")
    if dry_run_only:
        result.message = "dry run only: nothing was changed"
        return result

    kind = (stable["apiVersion"], stable["kind"])
    job = next(o for o in stages["canary"] if o["kind"] == "Job")
    job_name = job["metadata"]["name"]
    canary_objects = [o for o in stages["canary"] if o["kind"] not in ("Job", "ClusterBaseModel", "ClusterServingRuntime")]
    _remove_finished_job(cluster, namespace, job_name, timeout_s=min(timeout_s, 300), poll_s=poll_s, progress=progress)
    existing = cluster.get(*kind, namespace, app)
    restore: int | None = None
    promoted = False
    try:
        if existing is not None and flavor == "plain":
            replicas = int(existing.get("spec", {}).get("replicas", 1))
            if replicas > 1:  # the canary takes one copy's GPUs: capacity minus one, as a rollout step
                cluster.merge_patch(*kind, namespace, app, {"spec": {"replicas": replicas - 1}}, dry_run=False)
                restore = replicas
                progress(f"{stable['kind']} {app}: {replicas} -> {replicas - 1} copies while the canary is qualified")
        for obj in stages["canary"]:
            cluster.apply(obj, dry_run=False)
            result.applied.append(_key(obj))
        progress(f"waiting for Job {job_name} (deploytool qualify against the canary)")
        result.qualification = _wait_for_job(cluster, namespace, job_name, timeout_s, poll_s)
        if result.qualification != "passed":
            result.message = (f"qualification {result.qualification}: release {result.release} not promoted; the "
                              f"previous release keeps serving (Job {job_name} has the report in its log)")
            raise DeployError(result.message)
        for obj in stages["release"]:
            cluster.apply(obj, dry_run=False)
            result.applied.append(_key(obj))
        promoted = True
    finally:
        # Whatever happened (a failed gate, an API error, Ctrl-C): no canary is left behind,
        # and a stable workload that lent a copy gets it back unless the release replaced it.
        for obj in canary_objects:
            cluster.delete(obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if restore is not None and not promoted:
            cluster.merge_patch(*kind, namespace, app, {"spec": {"replicas": restore}}, dry_run=False)
    if stable["kind"] == "LeaderWorkerSet":
        record_release(cluster, stable)
    if stable["kind"] == "InferenceService":
        prune_runtimes(cluster, stable)
    result.promoted = True
    result.message = f"release {result.release} qualified and promoted; the rollout is the cluster's from here"
    return result


def _remove_finished_job(cluster: Cluster, namespace: str, name: str, *, timeout_s: float, poll_s: float,
                         progress: Callable[[str], None]) -> None:
    """The same inputs qualified again: the earlier attempt's Job (finished) makes way."""
    job = cluster.get("batch/v1", "Job", namespace, name)
    if job is None:
        return
    status = job.get("status", {})
    if not (status.get("succeeded") or status.get("failed")):
        raise DeployError(f"Job {name} is still running: another `k8s apply` of this release is under way",
                          hint="wait for it (`deploytool k8s status`), or delete the Job")
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
    out.update({
        "release": annotations.get(f"{rel.LABEL_DOMAIN}/release"),
        "image": annotations.get(f"{rel.LABEL_DOMAIN}/image"),
        "profile": annotations.get(f"{rel.LABEL_DOMAIN}/profile"),
        "replicas": spec.get("replicas", spec.get("engine", {}).get("minReplicas")),
        "ready": status.get("readyReplicas"),
        "updated": status.get("updatedReplicas"),
        "conditions": {c.get("type"): c.get("status") for c in status.get("conditions", [])},
    })
    out["canary"] = cluster.get(*kind, namespace, f"{app}-canary") is not None
    jobs = cluster.list("batch/v1", "Job", namespace, {"app.kubernetes.io/name": app})
    if jobs:
        last = max(jobs, key=lambda j: int(j["metadata"].get("labels", {}).get(f"{rel.LABEL_DOMAIN}/release", "0")))
        st = last.get("status", {})
        out["last_qualification"] = {"job": last["metadata"]["name"],
                                     "verdict": "passed" if st.get("succeeded") else "failed" if st.get("failed")
                                     else "running"}
    return out
