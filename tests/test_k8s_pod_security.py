"""Every pod deploytool renders for Kubernetes, checked against the Pod Security Standards'
`restricted` profile (kubernetes.io/docs/concepts/security/pod-security-standards, the
baseline's rules and the restricted ones), each exception the server needs named here and
argued in src/deploytool/k8s/pod.py and docs/kubernetes.md ("Pod security"). The check is ours,
the rules the standard's, applied to every pod template of every rendered object, both
flavours, every card profile and the sim; it runs everywhere, checkov (tests/test_checkov.py)
only where it is installed.
Also: no service-account token, the hub token only for gated weights, the JIT cache the
release's own, and a NetworkPolicy that admits the gateway and the qualify Job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from keyed_profile import keyed

from deploytool.k8s import K8sRequest, declared_toolchain, render_manifests, render_stages
from deploytool.k8s.render import GATEWAY_LABEL
from deploytool.profiles import ProfileStore

HERE = Path(__file__).resolve().parent
IMAGE = "registry.example/deploytool/sglang@sha256:" + "a" * 64
QUALIFY_IMAGE = "registry.example/deploytool/deploytool@sha256:" + "b" * 64
STORE = ProfileStore([HERE / "profiles_k8s"])
PROFILES = [
    "sim",
    "rtx5090-qwen3.6-35b-a3b-nvfp4",
    "h200-qwen3.6-35b-a3b-fp8",
    "b300x8-glm5.2-nvfp4-tp8",
    "gb300x4x2-glm5.2-nvfp4-tp8",
]
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
# The argued exceptions (pod.py's POD_SECURITY comment): the server's pods run as the image's
# root, and mount the weights and the release's JIT cache from the node.
SERVER_HOSTPATHS = {"model", "jit-cache"}


def request(name: str, flavor: str = "plain", *, secrets: bool = False) -> K8sRequest:
    profile = STORE.get(name)
    return K8sRequest(
        profile=keyed(profile) if secrets else profile,
        image=IMAGE,
        flavor=flavor,
        toolchain=declared_toolchain(profile),
        qualify_image=QUALIFY_IMAGE,
    )


def pods(obj: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod spec (or OME's pod fields) anywhere in a rendered object."""
    if isinstance(obj, dict):
        if "containers" in obj or "runner" in obj:
            yield where, obj
        for key, value in obj.items():
            yield from pods(value, f"{where}.{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from pods(value, f"{where}[{i}]")


def violations(pod: dict[str, Any], *, job: bool) -> list[str]:
    found = []
    for flag in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        if pod.get(flag) and flag != "hostUsers":
            found.append(f"{flag} is set")
    pod_ctx = pod.get("securityContext", {})
    containers = [
        *pod.get("initContainers", []),
        *pod.get("containers", []),
        *([pod["runner"]] if "runner" in pod else []),
    ]
    for volume in pod.get("volumes", []):
        kind = next(k for k in volume if k != "name")
        if kind not in RESTRICTED_VOLUMES and not (
            kind == "hostPath" and not job and volume["name"] in SERVER_HOSTPATHS
        ):
            found.append(f"volume {volume['name']}: {kind}")
    for c in containers:
        ctx = c.get("securityContext", {})
        name = c["name"]
        if ctx.get("privileged"):
            found.append(f"{name}: privileged")
        if ctx.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        if "ALL" not in ctx.get("capabilities", {}).get("drop", []):
            found.append(f"{name}: capabilities not dropped (ALL)")
        if set(ctx.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities added")
        seccomp = ctx.get("seccompProfile", pod_ctx.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccomp {seccomp}")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            found.append(f"{name}: hostPort")
        user = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
        if user == 0:
            found.append(f"{name}: runAsUser 0")
        if job and not ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot is not true")
    return found


@pytest.mark.parametrize("flavor", ["plain", "ome"])
@pytest.mark.parametrize("name", PROFILES)
def test_every_rendered_pod_meets_the_restricted_profile_but_the_argued_exceptions(name, flavor):
    if flavor == "ome" and name == "sim":
        pytest.skip("OME serves card profiles only")
    objects = render_manifests(request(name, flavor, secrets=True))
    checked = 0
    for obj in objects:
        for where, pod in pods(obj):
            job = obj["kind"] == "Job"
            assert violations(pod, job=job) == [], f"{obj['kind']} {obj['metadata']['name']}{where}"
            checked += 1
            # a whole pod spec, or OME's engine fields it builds the pods from: the same pod settings
            assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            for container in [
                *pod.get("initContainers", []),
                *pod.get("containers", []),
                *([pod["runner"]] if "runner" in pod else []),
            ]:
                # every container but the server's has a read-only root (pod.py says why not the server)
                if container["name"] in ("server", "ome-container"):
                    assert "readOnlyRootFilesystem" not in container["securityContext"]
                    continue
                assert container["securityContext"].get("readOnlyRootFilesystem") is True, container["name"]
    assert checked >= 2


def test_the_checker_sees_what_the_renderer_used_to_render():
    """Yesterday's pod: no securityContext, a shared node cache, a token mounted: the check fails."""
    old = {
        "containers": [{"name": "server", "image": IMAGE}],
        "volumes": [{"name": "scratch", "hostPath": {"path": "/var/lib/x"}}],
    }
    found = violations(old, job=True)
    assert any("allowPrivilegeEscalation" in f for f in found) and any("capabilities" in f for f in found)
    assert any("seccomp" in f for f in found) and any("hostPath" in f for f in found)
    assert any("runAsNonRoot" in f for f in found)


def test_the_hub_token_reaches_only_a_profile_that_declares_it():
    for keyed_profile in (False, True):
        objects = render_manifests(request("h200-qwen3.6-35b-a3b-fp8", secrets=keyed_profile))
        envs = [
            e["name"]
            for _, pod in (p for o in objects for p in pods(o))
            for c in pod.get("containers", [])
            for e in c.get("env", [])
        ]
        # as a file, read through HF_TOKEN_PATH as on a Docker host: never in the environment
        assert ("HF_TOKEN_PATH" in envs) == keyed_profile and "HF_TOKEN" not in envs
        assert not any(
            "secretKeyRef" in json.dumps(c.get("env", []))
            for _, pod in (p for o in objects for p in pods(o))
            for c in pod.get("containers", [])
        )


def test_the_jit_cache_is_the_releases_own():
    def folder(req: K8sRequest) -> str:
        deployment = next(o for o in render_manifests(req) if o["kind"] == "Deployment")
        return next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "jit-cache")[
            "hostPath"
        ]["path"]

    one = request("h200-qwen3.6-35b-a3b-fp8")
    other = request("h200-qwen3.6-35b-a3b-fp8")
    other.profile = other.profile.model_copy(
        update={"name": "another-release"}
    )  # same toolchain, another app
    elsewhere = request("h200-qwen3.6-35b-a3b-fp8")
    elsewhere.namespace = "team-b"
    assert len({folder(one), folder(other), folder(elsewhere)}) == 3


@pytest.mark.parametrize("flavor", ["plain", "ome"])
def test_a_network_policy_admits_the_gateway_and_the_qualify_job_only(flavor):
    req = request("h200-qwen3.6-35b-a3b-fp8", flavor, secrets=True)
    stages = render_stages(req)
    policy, job_policy = [o for o in stages["canary"] if o["kind"] == "NetworkPolicy"]
    # the Job's pods serve nothing: selected, and admitting no one
    assert job_policy["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in job_policy["spec"]
    job = next(o for o in stages["canary"] if o["kind"] == "Job")
    # the server pods' labels: the Deployment's template, or the labels OME puts on the engine's pods
    if flavor == "plain":
        server_labels = next(o for o in stages["release"] if o["kind"] == "Deployment")["spec"]["template"][
            "metadata"
        ]["labels"]
        canary_labels = next(o for o in stages["canary"] if o["kind"] == "Deployment")["spec"]["template"][
            "metadata"
        ]["labels"]
        port = "http"  # the container port's name
    else:
        server_labels = next(o for o in stages["release"] if o["kind"] == "InferenceService")["spec"][
            "engine"
        ]["labels"]
        canary_labels = next(o for o in stages["canary"] if o["kind"] == "InferenceService")["spec"][
            "engine"
        ]["labels"]
        runtime = next(o for o in stages["canary"] if o["kind"] == "ClusterServingRuntime")
        port = runtime["spec"]["engineConfig"]["runner"]["ports"][0]["containerPort"]  # OME builds the pods
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]

    def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in selector.items())

    assert selects(spec["podSelector"]["matchLabels"], server_labels)
    assert selects(spec["podSelector"]["matchLabels"], canary_labels)

    def admitted(labels: dict[str, str]) -> list[Any]:
        return [
            rule.get("ports")
            for rule in spec["ingress"]
            if any(selects(peer["podSelector"]["matchLabels"], labels) for peer in rule["from"])
        ]

    assert admitted(job["spec"]["template"]["metadata"]["labels"]) == [[{"port": port, "protocol": "TCP"}]]
    assert admitted({GATEWAY_LABEL: "true"}) == [[{"port": port, "protocol": "TCP"}]]
    assert admitted({"app.kubernetes.io/name": "someone-else"}) == []
    assert admitted(server_labels) == [None]  # the ranks of a copy talk on any port
    assert selects(
        job_policy["spec"]["podSelector"]["matchLabels"], job["spec"]["template"]["metadata"]["labels"]
    )


@pytest.mark.parametrize("flavor", ["plain", "ome"])
def test_every_pod_is_one_the_kubernetes_clients_models_read_back_unchanged(flavor):
    """Each pod spec (and each set of OME engine fields with its runner as the container) read into
    the official client's V1PodSpec and written back: a field the model does not know, or one
    of the wrong shape, would be dropped or changed. The CRD schemas check OME's own nesting."""
    from kubernetes.client import ApiClient

    client = ApiClient()
    checked = 0
    for name in ("h200-qwen3.6-35b-a3b-fp8", "gb300x4x2-glm5.2-nvfp4-tp8"):
        for obj in render_manifests(request(name, flavor, secrets=True)):
            for where, pod in pods(obj):
                spec = {k: v for k, v in pod.items() if k not in ("runner", "size", "labels", "annotations")}
                if "runner" in pod:
                    spec["containers"] = [pod["runner"]]
                model = client._ApiClient__deserialize(spec, "V1PodSpec")  # the client's own reader
                assert client.sanitize_for_serialization(model) == spec, f"{obj['kind']}{where}"
                checked += 1
    assert checked >= 4
