"""A stand-in Kubernetes API server on loopback, for `deploytool k8s` tests (no cluster is
reachable from these machines).

It is honest about what it is: it records every request the official `kubernetes` client
sends (method, path, query, content type, body), keeps objects in memory, answers server-side
apply (application/apply-patch+yaml), merge patch, GET, list by label selector and DELETE with
the API's own JSON shapes, and does NOT persist a request that carries dryRun=All. Two
controllers are imitated as little as the tests need: a real apply of a Job sets its status to
the verdict the test chose, and a real change of a Deployment's pod template records a
ReplicaSet with the next `deployment.kubernetes.io/revision`, as the Deployment controller does.
It validates nothing: schema validation is tested offline against the published schemas.
"""

from __future__ import annotations

import copy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit


@dataclass
class Call:
    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    body: Any


@dataclass
class StandInCluster:
    job_verdict: str = "succeeded"  # or "failed"
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> object
    calls: list[Call] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)  # paths whose dry run answers 422
    break_writes: set[str] = field(default_factory=set)  # paths whose real write answers 500
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- the imitated controllers ---------------------------------------------------------------
    def _after_write(self, path: str, obj: dict[str, Any], before: dict[str, Any] | None) -> None:
        if obj.get("kind") == "Job" and self.job_verdict:
            obj["status"] = {self.job_verdict: 1}
        if obj.get("kind") == "Deployment":
            old_template = (before or {}).get("spec", {}).get("template")
            if old_template != obj["spec"]["template"]:
                revision = (
                    int(
                        (before or {})
                        .get("metadata", {})
                        .get("annotations", {})
                        .get("deployment.kubernetes.io/revision", "0")
                    )
                    + 1
                )
                obj["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = str(
                    revision
                )
                ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
                rs_name = f"{name}-rev{revision}"
                template = copy.deepcopy(obj["spec"]["template"])
                template["metadata"].setdefault("labels", {})["pod-template-hash"] = f"hash{revision}"
                self.objects[f"/apis/apps/v1/namespaces/{ns}/replicasets/{rs_name}"] = {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": {
                        "name": rs_name,
                        "namespace": ns,
                        "labels": dict(template["metadata"]["labels"]),
                        "annotations": {"deployment.kubernetes.io/revision": str(revision)},
                    },
                    "spec": {"template": template},
                }
            elif before is not None:
                obj["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = before[
                    "metadata"
                ]["annotations"]["deployment.kubernetes.io/revision"]

    # -- requests -------------------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, content_type: str | None, body: Any) -> tuple[int, Any]:
        parts = urlsplit(raw_path)
        query = dict(parse_qsl(parts.query))
        path = parts.path
        with self.lock:
            self.calls.append(Call(method, path, query, content_type, copy.deepcopy(body)))
            dry = query.get("dryRun") == "All"
            if method == "GET":
                if path in self.objects:
                    return 200, self.objects[path]
                items = [
                    o
                    for p, o in self.objects.items()
                    if p.rsplit("/", 1)[0] == path and _matches(o, query.get("labelSelector", ""))
                ]
                if items or _is_collection(path):
                    return 200, {"kind": "List", "apiVersion": "v1", "items": items}
                return 404, _status(404, f"{path} not found")
            if method == "PATCH":
                if dry and path in self.refuse:
                    return 422, _status(422, f"{path} is invalid: refused by the stand-in")
                if not dry and path in self.break_writes:
                    return 500, _status(500, f"{path}: the stand-in failed this write")
                before = self.objects.get(path)
                if content_type == "application/apply-patch+yaml":
                    obj = copy.deepcopy(body)
                    if before is not None and "status" in before:
                        obj.setdefault("status", before["status"])
                elif content_type == "application/merge-patch+json":
                    if before is None:
                        return 404, _status(404, f"{path} not found")
                    obj = _merge(copy.deepcopy(before), body)
                else:
                    return 415, _status(415, f"unsupported patch type {content_type}")
                if dry:
                    return 200, obj
                self._after_write(path, obj, before)
                self.objects[path] = obj
                return 200, obj
            if method == "DELETE":
                if dry:
                    return 200, _status(200, "dry run")
                if self.objects.pop(path, None) is None:
                    return 404, _status(404, f"{path} not found")
                return 200, _status(200, "deleted")
        return 405, _status(405, method)

    def writes(self) -> list[Call]:
        return [c for c in self.calls if c.method in ("PATCH", "DELETE")]


def _status(code: int, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "code": code,
        "message": message,
        "status": "Success" if code < 300 else "Failure",
    }


def _is_collection(path: str) -> bool:
    from deploytool.k8s.cluster import RESOURCES

    return path.rsplit("/", 1)[-1] in {plural for plural, _ in RESOURCES.values()}


def _matches(obj: dict[str, Any], selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels", {})
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge(target.get(key), value)
    return target


def serve(cluster: StandInCluster) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            code, payload = cluster.handle(self.command, self.path, self.headers.get("Content-Type"), body)
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_DELETE = _answer

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
