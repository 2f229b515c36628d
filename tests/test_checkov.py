"""checkov, the field's scanner, over what deploytool writes: the Dockerfiles `build` renders
(a sim, a card and a locked wheels profile), the compose files `up` writes (the sim and a card
profile, with an API key and a hub token), and every Kubernetes object `render --k8s` renders
(both flavours, a single-node and a multi-node card profile and the sim, with both secrets).
OME's custom kinds are opaque to checkov, so the pods OME builds from a ClusterServingRuntime's
engine (and its leader and worker) are also written as the Pods they become.

Every finding is fixed or listed in EXCEPTIONS with one line of why; a new finding fails the
test, and so does an exception that no longer fires (it would hide the next one). docs/security.md
says how to install checkov (its own virtual environment: its pins conflict with deploytool's).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from keyed_profile import keyed

from deploytool.host.slots import Slot
from deploytool.image.build import plan_build
from deploytool.k8s import K8sRequest, declared_toolchain, render_manifests
from deploytool.profiles import ProfileStore
from deploytool.release.compose import RenderRequest, render_compose

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
IMAGE = "registry.example/deploytool/sglang@sha256:" + "a" * 64
QUALIFY_IMAGE = "registry.example/deploytool/deploytool@sha256:" + "b" * 64
GPU = "GPU-698e6783-c3a1-e93d-9440-6334680c7c1f"
DOCKERFILE_PROFILES = ["sim", "b300x8-glm5.2-nvfp4-tp8", "rtx5090-qwen3.6-35b-a3b-nvfp4-wheels"]
K8S_PROFILES = ["sim", "h200-qwen3.6-35b-a3b-fp8", "gb300x4x2-glm5.2-nvfp4-tp8"]
K8S_STORE = ProfileStore([HERE / "profiles_k8s"])

# (check id, where: see where()) -> why. Each is argued at length where it is rendered
# (k8s/pod.py, images/*/Dockerfile.j2) and in docs/security.md.
EXCEPTIONS: dict[tuple[str, str], str] = {
    (
        "CKV_DOCKER_2",
        "dockerfile",
    ): "no HEALTHCHECK in the image: the profile's health section (path, port, timings, the "
    "key's header) is the compose healthcheck and the Kubernetes probes, per release",
    (
        "CKV_DOCKER_3",
        "dockerfile",
    ): "no USER: the server runs as root (pod.py POD_SECURITY: root-owned cache and hub "
    "folders on the host and node, HOME=/root caches not yet all under /cache)",
    (
        "CKV_K8S_10",
        "k8s:server",
    ): "no CPU request for the server: the profile has no host-side figure; its cards place it",
    (
        "CKV_K8S_11",
        "k8s:server",
    ): "no CPU limit: throttling a server's scheduler and tokenizer threads stalls its GPUs",
    ("CKV_K8S_11", "k8s:server-worker"): "as for the server: a worker rank is the same process",
    ("CKV_K8S_12", "k8s:server"): "no memory request: the profile has no host-memory figure to request",
    (
        "CKV_K8S_13",
        "k8s:server",
    ): "no memory limit: host memory peaks while weights stream in; a low guess kills the load",
    ("CKV_K8S_13", "k8s:server-worker"): "as for the server: a worker rank loads its shard the same way",
    (
        "CKV_K8S_22",
        "k8s:server",
    ): "writable root for the server: SGLang writes outside its mounts (/tmp IPC, new caches)",
    ("CKV_K8S_22", "k8s:server-worker"): "as for the server",
    (
        "CKV_K8S_23",
        "k8s:server",
    ): "root in the server: the image has no other user, its caches are root-owned node folders",
    ("CKV_K8S_23", "k8s:server-worker"): "as for the server",
    ("CKV_K8S_40", "k8s:server"): "the same root user: no high UID to run as",
    ("CKV_K8S_40", "k8s:server-worker"): "as for the server",
    (
        "CKV_K8S_8",
        "k8s:server-worker",
    ): "no liveness probe on a worker rank: it serves no HTTP; the leader's probes judge "
    "the group and a lost rank recreates it (RecreateGroupOnPodRestart)",
    ("CKV_K8S_9", "k8s:server-worker"): "no readiness probe on a worker rank: no Service sends it traffic",
}


def checkov_bin() -> str | None:
    """DEPLOYTOOL_CHECKOV, else checkov next to this Python, in .venv/checkov (docs/security.md),
    or on PATH."""
    candidates = [
        os.environ.get("DEPLOYTOOL_CHECKOV"),
        str(Path(sys.executable).parent / "checkov"),
        str(ROOT / ".venv" / "checkov" / "bin" / "checkov"),
        shutil.which("checkov"),
    ]
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


def lws_pods(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The leader and worker Pods of a LeaderWorkerSet (a custom kind checkov does not read)."""
    template = obj["spec"]["leaderWorkerTemplate"]
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{obj['metadata']['name']}-{role}",
                "namespace": obj["metadata"]["namespace"],
                "labels": template[f"{role}Template"]["metadata"]["labels"],
            },
            "spec": template[f"{role}Template"]["spec"],
        }
        for role in ("leader", "worker")
    ]


def ome_pods(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The Pods OME builds from a runtime's engine fields: its pod fields, the runner as the container."""
    engine = obj["spec"]["engineConfig"]
    parts = (
        {"leader": engine["leader"], "worker": engine["worker"]} if "leader" in engine else {"engine": engine}
    )
    pods = []
    for role, fields in parts.items():
        spec = {k: v for k, v in fields.items() if k not in ("runner", "size", "labels", "annotations")}
        spec["containers"] = [fields["runner"]]
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{obj['metadata']['name']}-{role}",
                    "namespace": "inference",
                    "labels": engine.get("labels", {}),
                },
                "spec": spec,
            }
        )
    return pods


def write_inputs(folder: Path) -> None:
    """What deploytool writes, each kind in its own folder (the folder names the exceptions' scope)."""
    store = ProfileStore()
    for name in DOCKERFILE_PROFILES:
        (folder / "dockerfile" / name).mkdir(parents=True)
        (folder / "dockerfile" / name / "Dockerfile").write_text(plan_build(store.get(name)).dockerfile)
    (folder / "compose").mkdir()
    for name, slot in (("sim", Slot()), ("h200-qwen3.6-35b-a3b-fp8", Slot((GPU,)))):
        profile = keyed(store.get(name) if name == "sim" else K8S_STORE.get(name))
        doc = render_compose(RenderRequest(profile=profile, slot=slot, release=1, image="deploytool/x:y"))
        (folder / "compose" / f"{name}.yaml").write_text(yaml.safe_dump(doc))
    (folder / "k8s").mkdir()
    for name in K8S_PROFILES:
        for flavor in ("plain", "ome"):
            if flavor == "ome" and name == "sim":
                continue  # OME serves card profiles only
            profile = keyed(K8S_STORE.get(name))
            objects = render_manifests(
                K8sRequest(
                    profile=profile,
                    image=IMAGE,
                    toolchain=declared_toolchain(profile),
                    qualify_image=QUALIFY_IMAGE,
                    flavor=flavor,
                    namespace="inference",
                )
            )
            objects += [p for o in objects if o["kind"] == "ClusterServingRuntime" for p in ome_pods(o)]
            objects += [p for o in objects if o["kind"] == "LeaderWorkerSet" for p in lws_pods(o)]
            (folder / "k8s" / f"{name}-{flavor}.yaml").write_text(
                "---\n".join(yaml.safe_dump(o) for o in objects)
            )


def run_checkov(binary: str, folder: Path) -> list[dict[str, Any]]:
    """Failed checks of every framework that reads these files, as checkov reports them."""
    out = subprocess.run(
        [
            binary,
            "-d",
            str(folder),
            "--framework",
            "dockerfile",
            "kubernetes",
            "secrets",
            "--output",
            "json",
            "--quiet",
            "--skip-download",
            "--compact",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode in (0, 1), out.stderr[-3000:]  # 1: findings
    reports = json.loads(out.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    # a file checkov cannot parse is a file it did not scan
    assert all(r.get("summary", {}).get("parsing_errors", 0) == 0 for r in reports), out.stdout[:3000]
    return [check for report in reports for check in report.get("results", {}).get("failed_checks", [])]


def where(check: dict[str, Any]) -> str:
    """'<folder>:<role>': the folder says what kind of file (dockerfile, compose, k8s); for k8s the
    role of the resource: the server's workload (a Deployment, or a Pod OME builds), a worker rank
    of a copy spanning nodes, or the qualify Job (checkov also checks the Pod it makes)."""
    folder = Path(check["file_path"].lstrip("/")).parts[0]
    if folder != "k8s":
        return folder
    kind, _, name = ([*check.get("resource", "").split("."), "", "", ""])[:3]
    if kind == "Job" or "-qualify-" in name:
        return "k8s:qualify-job"
    return "k8s:server-worker" if name.endswith("-worker") else "k8s:server"


def argued(check_id: str, place: str) -> str | None:
    return EXCEPTIONS.get((check_id, place))


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str]]:
    binary = checkov_bin()
    if binary is None:
        pytest.skip(
            "checkov is not installed: `make checkov` puts it in .venv/checkov (a virtual environment of "
            "its own: its pins conflict with deploytool's; docs/security.md), or set DEPLOYTOOL_CHECKOV"
        )
    folder = tmp_path_factory.mktemp("written")
    write_inputs(folder)
    return sorted({(c["check_id"], where(c)) for c in run_checkov(binary, folder)})


def test_every_checkov_finding_is_fixed_or_argued(findings):
    unargued = [f"{cid} {place}" for cid, place in findings if argued(cid, place) is None]
    assert unargued == [], "new checkov findings: fix them or argue each in EXCEPTIONS"


def test_every_argued_exception_still_fires(findings):
    stale = [key for key in EXCEPTIONS if key not in findings]
    assert stale == [], "exceptions that no longer fire: remove them"


def test_checkov_sees_what_it_is_meant_to_see(tmp_path: Path):
    """Not vacuous: a Dockerfile without a USER, a privileged pod and a key in a compose file are found,
    each where the test puts what deploytool writes."""
    binary = checkov_bin()
    if binary is None:
        pytest.skip("checkov is not installed: `make checkov` (docs/security.md)")
    (tmp_path / "dockerfile").mkdir()
    (tmp_path / "dockerfile" / "Dockerfile").write_text("FROM debian:bookworm\nRUN true\n")
    (tmp_path / "k8s").mkdir()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": IMAGE, "securityContext": {"privileged": True}}]},
    }
    (tmp_path / "k8s" / "pod.yaml").write_text(yaml.safe_dump(pod))
    (tmp_path / "compose").mkdir()
    token = "ghp_" + "".join(
        secrets.choice(string.ascii_letters + string.digits) for _ in range(36)
    )  # a fresh one
    leaked = {"services": {"server": {"image": "x", "environment": {"GITHUB_TOKEN": token}}}}
    (tmp_path / "compose" / "compose.yaml").write_text(yaml.safe_dump(leaked))
    found = {(c["check_id"], where(c)) for c in run_checkov(binary, tmp_path)}
    assert {("CKV_DOCKER_3", "dockerfile"), ("CKV_K8S_16", "k8s:server")} <= found
    assert any(folder == "compose" and cid.startswith("CKV_SECRET") for cid, folder in found)
