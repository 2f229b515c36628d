"""The Kubernetes API as deploytool calls it: a few REST calls (server-side apply, get, list,
merge patch, delete) through the official `kubernetes` client's ApiClient, which brings the
kubeconfig contexts, auth and TLS."""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import DeploytoolError, EngineUnavailable, UsageError

K8S_EXTRA_INSTALL = "pip install 'deploytool[k8s]' (or pipx install / uv tool install 'deploytool[k8s]')"
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
    ("networking.k8s.io/v1", "NetworkPolicy"): ("networkpolicies", True),
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

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        method, url, headers, body, post = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api.call_api(
                method, url, header_params=headers, body=body, post_params=post, _request_timeout=60
            )
        except Exception as exc:  # urllib3 connection errors, TLS: no cluster answered
            raise EngineUnavailable(
                f"the Kubernetes API at {self.api.configuration.host} did not answer: {exc}",
                hint="check --context and `kubectl cluster-info`",
            ) from None
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

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", resource_path(api_version, kind, namespace, name))
        except ClusterError as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self, api_version: str, kind: str, namespace: str | None, selector: dict[str, str]
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in selector.items()))]
        return self._call("GET", resource_path(api_version, kind, namespace), query=query).get("items", [])

    def merge_patch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: dict[str, Any],
        *,
        dry_run: bool,
    ) -> dict[str, Any]:
        query = [("dryRun", "All")] if dry_run else []
        return self._call(
            "PATCH",
            resource_path(api_version, kind, namespace, name),
            query=query,
            body=patch,
            content_type=MERGE_PATCH,
        )

    def delete(self, api_version: str, kind: str, namespace: str | None, name: str) -> None:
        try:
            self._call(
                "DELETE",
                resource_path(api_version, kind, namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"},
            )
        except ClusterError as exc:
            if exc.status != 404:
                raise


def connect(context: str | None = None) -> Cluster:
    """A kubeconfig context (or the in-cluster service account when there is no kubeconfig)."""
    try:
        from kubernetes import config
        from kubernetes.config.config_exception import ConfigException
    except ImportError:  # an extra: the Docker path and `render --k8s` need no Kubernetes client
        raise UsageError(
            "the Kubernetes commands (k8s apply, status, rollback) need the Kubernetes client, "
            "which is not installed",
            hint=f"install deploytool with its k8s extra: {K8S_EXTRA_INSTALL}",
        ) from None

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
        raise EngineUnavailable(
            f"no Kubernetes cluster configured: {exc}",
            hint="set KUBECONFIG or pass --context NAME (kubectl config get-contexts)",
        ) from None
    return Cluster(api_client)
