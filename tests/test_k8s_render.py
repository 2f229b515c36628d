"""`render --k8s`: every card profile, several replica counts, both flavours, validated offline
against the Kubernetes OpenAPI schemas (kubernetes-validate) and the published CRD schemas;
and each field the release needs is there, derived from the same profile as the compose file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from keyed_profile import from_hub, keyed

from deploytool.errors import UsageError
from deploytool.host.slots import Slot
from deploytool.k8s import K8sRequest, declared_toolchain, render_manifests, render_stages
from deploytool.k8s import release as rel
from deploytool.k8s.validate import (
    K8S_VERSIONS,
    available_versions,
    crd_dirs,
    crds_available,
    validate_objects,
)
from deploytool.profiles import ProfileStore
from deploytool.release.compose import RenderRequest, render_compose

HERE = Path(__file__).resolve().parent
IMAGE = "registry.example/deploytool/sglang@sha256:" + "a" * 64
QUALIFY_IMAGE = "registry.example/deploytool/deploytool@sha256:" + "b" * 64
CARD_PROFILES = [
    "rtx5090-qwen3.6-35b-a3b-nvfp4",
    "rtx-pro-6000-qwen3.6-35b-a3b-nvfp4",
    "h200-qwen3.6-35b-a3b-fp8",
    "b300x8-glm5.2-nvfp4-tp8",
    "b300x8-glm5.2-nvfp4-tep8",
    "gb300x4-glm5.2-nvfp4-tp4",
    "gb300x4x2-glm5.2-nvfp4-tp8",  # tests/profiles_k8s: one copy over two nodes
]
REPLICAS = [1, 2, 8]
STORE = ProfileStore([HERE / "profiles_k8s"])
CRD_KINDS = {
    "plain": [("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")],
    "ome": [
        ("ome.io/v1beta1", "InferenceService"),
        ("ome.io/v1beta1", "ClusterServingRuntime"),
        ("ome.io/v1beta1", "ClusterBaseModel"),
    ],
}


def request(name: str, **kw) -> K8sRequest:
    profile = STORE.get(name)
    kw.setdefault("qualify_image", QUALIFY_IMAGE)
    return K8sRequest(profile=profile, image=IMAGE, toolchain=declared_toolchain(profile), **kw)


def by_kind(objects: list[dict], kind: str, name_suffix: str = "") -> dict:
    return next(
        o
        for o in objects
        if o["kind"] == kind
        and o["metadata"]["name"].endswith(name_suffix)
        and (name_suffix or not o["metadata"]["name"].endswith("-canary"))
    )


def skip_without_crds(custom: list[dict]) -> None:
    """The CRDs ship with deploytool (data/k8s-crds); only a DEPLOYTOOL_K8S_CRDS naming folders
    without them (or an installation that dropped the package data) leaves the custom kinds unchecked."""
    missing = crds_available({(o["apiVersion"], o["kind"]) for o in custom})
    if missing:
        pytest.skip(
            f"built-in kinds validated; no published CRD schema for {sorted(missing)} in "
            f"{', '.join(map(str, crd_dirs()))} (docs/kubernetes.md, 'Offline validation')"
        )


def test_kubernetes_validate_ships_the_versions_claimed():
    assert set(K8S_VERSIONS) <= set(available_versions())


@pytest.mark.parametrize("replicas", REPLICAS)
@pytest.mark.parametrize("flavor", ["plain", "ome"])
@pytest.mark.parametrize("name", CARD_PROFILES)
def test_every_card_profile_validates_offline(name: str, flavor: str, replicas: int):
    req = request(
        name,
        flavor=flavor,
        replicas=replicas,
        namespace="inference",
        node_selector={"pool": "gpu"},
        tolerations=rel.parse_tolerations(["dedicated=llm:NoSchedule"]),
    )
    objects = render_manifests(req)
    builtin = [o for o in objects if (o["apiVersion"], o["kind"]) not in CRD_KINDS[flavor]]
    custom = [o for o in objects if (o["apiVersion"], o["kind"]) in CRD_KINDS[flavor]]
    # Deployment, Service, PDB, Job: against Kubernetes 1.29 ... 1.37, always
    assert builtin and validate_objects(builtin, K8S_VERSIONS) == []
    # YAML round trip: what is written is the same data. The text is PyYAML's own emitter's, as
    # before; it is read back by libyaml's parser with the same safe constructor and resolver
    # (so the same types), not the pure-Python one: the reading was a fifth of this file's CPU.
    text = "---\n".join(yaml.safe_dump(o) for o in objects)
    assert list(yaml.load_all(text, Loader=yaml.CSafeLoader)) == objects
    if not custom:
        return
    skip_without_crds(custom)
    assert validate_objects(custom) == []


@pytest.mark.parametrize("flavor", ["plain", "ome"])
@pytest.mark.parametrize("name", ["h200-qwen3.6-35b-a3b-fp8", "gb300x4x2-glm5.2-nvfp4-tp8"])
def test_a_profile_with_an_api_key_and_a_hub_token_validates_offline(name: str, flavor: str):
    profile = keyed(STORE.get(name))
    objects = render_manifests(
        K8sRequest(
            profile=profile,
            image=IMAGE,
            toolchain=declared_toolchain(profile),
            qualify_image=QUALIFY_IMAGE,
            flavor=flavor,
        )
    )
    builtin = [o for o in objects if (o["apiVersion"], o["kind"]) not in CRD_KINDS[flavor]]
    assert validate_objects(builtin, K8S_VERSIONS) == []
    custom = [o for o in objects if (o["apiVersion"], o["kind"]) in CRD_KINDS[flavor]]
    skip_without_crds(custom)
    assert validate_objects(custom) == []


def test_validation_can_fail():
    """The validators are not vacuous: a wrong type and an unknown field are both caught."""
    objects = render_manifests(request("h200-qwen3.6-35b-a3b-fp8"))
    deployment = by_kind(objects, "Deployment")
    deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = [0]
    deployment["spec"]["template"]["spec"]["containers"][0]["startupProbes"] = {}
    findings = [str(f) for f in validate_objects([deployment], ["1.33"])]
    assert any("maxSurge" in f for f in findings) and any("startupProbes" in f for f in findings)


@pytest.mark.parametrize("name", CARD_PROFILES[:-1])
def test_each_required_field_is_present(name: str):
    req = request(
        name,
        replicas=4,
        retention=5,
        node_selector={"pool": "gpu"},
        tolerations=rel.parse_tolerations(["dedicated=llm:NoSchedule"]),
    )
    profile = req.profile
    objects = render_manifests(req)
    deployment = by_kind(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    server = pod["containers"][0]
    # a Deployment per single-node profile, replicas = serving copies
    assert rel.workload_kind(profile) == "Deployment" and deployment["spec"]["replicas"] == 4
    # GPUs, node choice, tolerations
    assert server["resources"]["limits"]["nvidia.com/gpu"] == str(profile.match.gpu_count)
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]
    assert term["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
    assert term["matchExpressions"][0]["values"] == [n.replace(" ", "-") for n in profile.match.gpu_name]
    assert pod["nodeSelector"] == {"pool": "gpu"}
    assert {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    # /dev/shm in memory at the profile's size
    dshm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in server["volumeMounts"]
    # the launch command and env are the compose renderer's, from the same profile
    compose = render_compose(
        RenderRequest(
            profile=profile, slot=Slot(("GPU-5f3c0a8e-1111-2222-3333-444455556666",)), release=1, image="x"
        )
    )["services"]["server"]
    assert server["command"] == compose["command"]
    assert {e["name"]: e["value"] for e in server["env"] if "value" in e} == compose["environment"]
    # the image by digest
    assert server["image"] == IMAGE and "@sha256:" in server["image"]
    # probes: the startup budget covered, then readiness and liveness on the health path
    startup = server["startupProbe"]
    assert startup["failureThreshold"] * startup["periodSeconds"] >= profile.health.budget_seconds()
    assert server["readinessProbe"]["httpGet"]["path"] == profile.health.path
    assert server["livenessProbe"]["httpGet"]["path"] == profile.health.path
    # rollout, disruption budget, history = retention
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    assert deployment["spec"]["revisionHistoryLimit"] == 5
    pdb = by_kind(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    # labels and annotations: profile, release, image, toolchain fingerprint, model revision
    meta = deployment["spec"]["template"]["metadata"]
    assert meta["labels"]["deploytool.dev/profile"] == profile.name
    assert meta["labels"]["deploytool.dev/release"] == "1"
    assert meta["annotations"]["deploytool.dev/image"] == IMAGE
    assert json.loads(meta["annotations"]["deploytool.dev/toolchain"]) == req.toolchain
    assert meta["labels"]["deploytool.dev/toolchain"] == rel.fingerprint_key(req.toolchain)
    assert meta["annotations"]["deploytool.dev/model-revision"] == "unpinned"
    # the JIT cache: the release's own node folder named by the fingerprint, checked by the wipe rule first
    cache = next(v for v in pod["volumes"] if v["name"] == "jit-cache")
    assert cache["hostPath"]["path"].endswith(
        f"/{req.namespace}/{req.app}/" + rel.fingerprint_key(req.toolchain)
    )
    assert pod["initContainers"][0]["name"] == "jit-cache-check"
    # no hub token for weights that need none (the profile declares no secrets.hf_token)
    assert all(e["name"] != "HF_TOKEN" for e in server["env"])


def test_qualification_comes_before_traffic():
    """The canary gets no users: the serving Service selects the stable track only; the qualify
    Job runs `deploytool qualify` against the canary's own Service."""
    stages = render_stages(request("h200-qwen3.6-35b-a3b-fp8", namespace="llm"))
    canary = by_kind(stages["canary"], "Deployment", "-canary")
    serving = by_kind(stages["release"], "Service")
    canary_labels = canary["spec"]["template"]["metadata"]["labels"]
    assert not all(canary_labels.get(k) == v for k, v in serving["spec"]["selector"].items())
    assert canary["spec"]["replicas"] == 1
    job = by_kind(stages["canary"], "Job")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["deploytool", "qualify"]
    assert command[command.index("--url") + 1] == "http://h200-qwen3-6-35b-a3b-fp8-canary.llm.svc:30000"
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == QUALIFY_IMAGE
    assert job["spec"]["backoffLimit"] == 0
    canary_service = by_kind(stages["canary"], "Service", "-canary")
    assert all(canary_labels.get(k) == v for k, v in canary_service["spec"]["selector"].items())


def test_a_new_toolchain_never_reuses_the_old_cache_folder():
    base = request("b300x8-glm5.2-nvfp4-tp8")
    newer = request("b300x8-glm5.2-nvfp4-tp8")
    newer.toolchain = {**newer.toolchain, "flashinfer": "0.7.3"}

    def folder(req: K8sRequest) -> str:
        pod = by_kind(render_manifests(req), "Deployment")["spec"]["template"]["spec"]
        return next(v for v in pod["volumes"] if v["name"] == "jit-cache")["hostPath"]["path"]

    assert folder(base) == folder(request("b300x8-glm5.2-nvfp4-tp8"))
    assert folder(base) != folder(newer)
    # the deploytool version alone compiles no kernel (cache.py's rule)
    same = request("b300x8-glm5.2-nvfp4-tp8")
    same.toolchain = {**same.toolchain, "deploytool": "9.9"}
    assert folder(same) == folder(base)


def test_a_profile_spanning_nodes_becomes_a_leaderworkerset():
    req = request("gb300x4x2-glm5.2-nvfp4-tp8", replicas=3)
    lws = by_kind(render_manifests(req), "LeaderWorkerSet")
    spec = lws["spec"]
    assert spec["replicas"] == 3 and spec["leaderWorkerTemplate"]["size"] == 2
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxUnavailable": 1, "maxSurge": 0}
    leader = spec["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    worker = spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    for container in (leader, worker):
        argv = container["command"]
        assert argv[argv.index("--nnodes") + 1] == "$(LWS_GROUP_SIZE)" and argv.count("--nnodes") == 1
        assert argv[argv.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
        assert argv[argv.index("--dist-init-addr") + 1].startswith("$(LWS_LEADER_ADDRESS):")
        assert argv[argv.index("--tp-size") + 1] == "8"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert "startupProbe" in leader and "readinessProbe" in leader and "startupProbe" not in worker
    service = next(
        o for o in render_manifests(req) if o["kind"] == "Service" and o["metadata"]["name"] == req.app
    )
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_ome_flavour_carries_flags_gpus_probes_and_model_source():
    req = request("b300x8-glm5.2-nvfp4-tep8", flavor="ome", replicas=2, namespace="llm")
    stages = render_stages(req)
    runtime = by_kind(stages["canary"], "ClusterServingRuntime")
    runner = runtime["spec"]["engineConfig"]["runner"]
    expected = req.profile.launch_argv()
    expected[expected.index("--model-path") + 1] = "$(MODEL_PATH)"
    assert runner["command"] == expected and "--ep-size" in runner["command"]
    assert runner["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert runner["startupProbe"]["httpGet"]["path"] == "/health" and "livenessProbe" in runner
    assert runner["image"] == IMAGE
    model = by_kind(stages["canary"], "ClusterBaseModel")
    assert (
        model["spec"]["storage"]["storageUri"] == f"hf://{req.profile.model.hub}"
    )  # card profiles name hub ids
    # a profile naming neither a hub id nor a host folder: a PVC the operator provides
    bare = req.profile.model_copy(deep=True)
    bare.model.hub = None
    unnamed = K8sRequest(
        profile=bare,
        image=IMAGE,
        toolchain=req.toolchain,
        qualify_image=QUALIFY_IMAGE,
        flavor="ome",
        namespace="llm",
    )
    assert (
        by_kind(render_stages(unnamed)["canary"], "ClusterBaseModel")["spec"]["storage"]["storageUri"]
        == f"pvc://llm:{req.app}-model/"
    )
    isvc = by_kind(stages["release"], "InferenceService")
    assert isvc["spec"]["runtime"]["name"] == f"{req.app}-r1" and isvc["spec"]["model"]["name"] == req.app
    assert isvc["spec"]["engine"]["minReplicas"] == 2
    job = by_kind(stages["canary"], "Job")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--url") + 1] == f"http://{req.app}-canary-engine.llm.svc:80"
    multi = render_stages(request("gb300x4x2-glm5.2-nvfp4-tp8", flavor="ome"))
    engine = by_kind(multi["canary"], "ClusterServingRuntime")["spec"]["engineConfig"]
    assert engine["worker"]["size"] == 1 and "runner" in engine["leader"]


def test_secrets_are_references_and_never_values(monkeypatch):
    req = request("rtx5090-qwen3.6-35b-a3b-nvfp4")
    req.profile = keyed(req.profile)
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_that_must_not_leak")
    ome = request("rtx5090-qwen3.6-35b-a3b-nvfp4", flavor="ome")
    ome.profile = keyed(ome.profile)
    text = json.dumps(render_manifests(req)) + json.dumps(render_manifests(ome))
    assert "hf_secret_value_that_must_not_leak" not in text
    assert '"secretName": "deploytool"' in text  # referenced by name (mounted as files), never held


def test_bad_input_is_refused_with_what_to_do():
    profile = STORE.get("h200-qwen3.6-35b-a3b-fp8")
    with pytest.raises(UsageError, match="not pinned by digest"):
        K8sRequest(profile=profile, image="registry.example/sglang:latest", toolchain={})
    with pytest.raises(UsageError, match="namespace"):
        K8sRequest(profile=profile, image=IMAGE, toolchain={}, namespace="Bad_NS")
    with pytest.raises(UsageError, match="KEY=VALUE"):
        rel.parse_node_selectors(["pool"])
    with pytest.raises(UsageError, match="EFFECT"):
        rel.parse_tolerations(["dedicated=llm:Sometimes"])
    with pytest.raises(
        UsageError, match="qualify_image: the qualification Job needs an image with deploytool installed"
    ):
        render_manifests(K8sRequest(profile=profile, image=IMAGE, toolchain={}))


def test_cli_writes_one_file_per_stage(tmp_path: Path):
    from typer.testing import CliRunner

    from deploytool.cli import app

    result = CliRunner().invoke(
        app,
        [
            "render",
            "--k8s",
            "--profile",
            "sim",
            "--image",
            IMAGE,
            "--replicas",
            "2",
            "--namespace",
            "demo",
            "--node-selector",
            "pool=cpu",
            "--qualify-image",
            QUALIFY_IMAGE,
            "-o",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    canary = list(yaml.safe_load_all((tmp_path / "1-canary.yaml").read_text()))
    release = list(yaml.safe_load_all((tmp_path / "2-release.yaml").read_text()))
    assert [o["kind"] for o in canary] == ["Deployment", "Service", "Job", "NetworkPolicy", "NetworkPolicy"]
    assert [o["kind"] for o in release] == ["Service", "PodDisruptionBudget", "Deployment"]
    assert release[-1]["spec"]["replicas"] == 2 and release[-1]["metadata"]["namespace"] == "demo"
    assert canary[2]["spec"]["template"]["spec"]["containers"][0]["image"] == QUALIFY_IMAGE
    # the reference runtime needs no GPU
    assert "resources" not in release[-1]["spec"]["template"]["spec"]["containers"][0]
    from deploytool.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["render", "--k8s", "--profile", "sim", "--image", "deploytool/sim:x"])
    assert exit_info.value.code == 2  # a usage error: the message says to pin the image by digest


@pytest.mark.parametrize("offline", [True, False])
def test_a_hub_model_is_served_from_the_node_hub_cache(offline: bool):
    profile = from_hub(STORE.get("rtx5090-qwen3.6-35b-a3b-nvfp4"), revision="v1.2", offline=offline)
    for flavor in ("plain", "ome"):
        objects = render_manifests(
            K8sRequest(
                profile=profile,
                image=IMAGE,
                toolchain=declared_toolchain(profile),
                qualify_image=QUALIFY_IMAGE,
                flavor=flavor,
                namespace="llm",
            )
        )
        builtin = [o for o in objects if (o["apiVersion"], o["kind"]) not in CRD_KINDS[flavor]]
        assert validate_objects(builtin, ["1.25", "1.37"]) == []
        if flavor == "plain":
            deployment = by_kind(objects, "Deployment")
            pod = deployment["spec"]["template"]["spec"]
            server = pod["containers"][0]
            model = next(v for v in pod["volumes"] if v["name"] == "model")
            assert model["hostPath"]["path"] == rel.HUB_CACHE_HOST
            mount = next(m for m in server["volumeMounts"] if m["name"] == "model")
            assert mount == {
                "name": "model",
                "mountPath": "/root/.cache/huggingface/hub",
                "readOnly": offline,
            }
            assert ({"name": "HF_HUB_OFFLINE", "value": "1"} in server["env"]) == offline
            assert deployment["metadata"]["annotations"]["deploytool.dev/model-revision"] == "v1.2"
        else:
            storage = by_kind(objects, "ClusterBaseModel")["spec"]["storage"]
            assert storage["storageUri"] == "hf://nvidia/Qwen3.6-35B-A3B-NVFP4"
            assert storage["parameters"] == {"revision": "v1.2", "secretKey": "hf_token"}
            assert storage["key"] == "deploytool"
            assert storage["path"] == "/var/lib/deploytool/models/rtx5090-qwen3-6-35b-a3b-nvfp4"
            custom = [o for o in objects if (o["apiVersion"], o["kind"]) in CRD_KINDS["ome"]]
            if not crds_available({(o["apiVersion"], o["kind"]) for o in custom}):
                assert validate_objects(custom) == []


def test_render_to_stdout_is_both_stages_in_apply_order(capsys):
    from deploytool.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "render",
                "--k8s",
                "--profile",
                "h200-qwen3.6-35b-a3b-fp8",
                "--image",
                IMAGE,
                "--qualify-image",
                QUALIFY_IMAGE,
                "--k8s-flavor",
                "ome",
                "--release",
                "7",
            ]
        )
    assert exit_info.value.code in (0, None)
    documents = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    assert [d["kind"] for d in documents] == [
        "ClusterBaseModel",
        "ClusterServingRuntime",
        "InferenceService",
        "Job",
        "NetworkPolicy",
        "NetworkPolicy",
        "InferenceService",
    ]
    assert documents[1]["metadata"]["name"] == "h200-qwen3-6-35b-a3b-fp8-r7"


def test_docs_state_the_validated_range():
    text = " ".join((HERE.parent / "docs" / "kubernetes.md").read_text().split())
    assert f"Kubernetes {K8S_VERSIONS[0]} to {K8S_VERSIONS[-1]}" in text.replace("**", "")
    import importlib.metadata

    assert f"`kubernetes-validate` {importlib.metadata.version('kubernetes-validate')}" in text


def test_docs_example_is_what_render_prints_today():
    from conftest import run_cli

    doc = (HERE.parent / "docs" / "kubernetes.md").read_text()
    section = doc.split("## A rendered example", 1)[1]
    command = section.split("`deploytool ", 1)[1].split("`", 1)[0].split()
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    done = run_cli(*command, env={"DEPLOYTOOL_INSTANCE": "default"})
    assert done.returncode == 0, done.stderr
    rendered = done.stdout
    assert example == rendered.split("\n---\n")[-1], "docs/kubernetes.md's example is stale: re-render it"
