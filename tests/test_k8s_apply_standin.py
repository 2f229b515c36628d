"""`deploytool k8s apply | status | rollback` through the official kubernetes client, against
a stand-in API server on loopback (tests/kube_standin.py says what it imitates and what not):
the order of the calls, dry run before any change, qualification before promotion, rollback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kube_standin import StandInCluster, serve
from kubernetes.client import ApiClient, Configuration

from deploytool.errors import DeployError
from deploytool.k8s import K8sRequest, declared_toolchain, render_stages
from deploytool.k8s.apply import apply_release, release_status
from deploytool.k8s.cluster import Cluster
from deploytool.k8s.history import rollback
from deploytool.profiles import ProfileStore

IMAGE_1 = "registry.example/deploytool/sglang@sha256:" + "1" * 64
IMAGE_2 = "registry.example/deploytool/sglang@sha256:" + "2" * 64
IMAGE_3 = "registry.example/deploytool/sglang@sha256:" + "3" * 64
IMAGE_4 = "registry.example/deploytool/sglang@sha256:" + "4" * 64
QUALIFY = "registry.example/deploytool/deploytool@sha256:" + "b" * 64
PROFILE = ProfileStore().get("h200-qwen3.6-35b-a3b-fp8")
DEPLOYMENTS = "/apis/apps/v1/namespaces/llm/deployments"


@pytest.fixture
def standin():
    state = StandInCluster()
    server, url = serve(state)
    config = Configuration(host=url)
    yield state, Cluster(ApiClient(config)), url
    server.shutdown()


def stages(image: str = IMAGE_1, release: int = 1, replicas: int = 3, flavor: str = "plain"):
    return render_stages(
        K8sRequest(
            profile=PROFILE,
            image=image,
            toolchain=declared_toolchain(PROFILE),
            release=release,
            replicas=replicas,
            namespace="llm",
            qualify_image=QUALIFY,
            flavor=flavor,
        )
    )


def apply_calls(state: StandInCluster):
    return [
        c for c in state.calls if c.method == "PATCH" and c.content_type == "application/apply-patch+yaml"
    ]


def test_dry_run_of_everything_comes_first_then_canary_qualify_promote(standin):
    state, cluster, _ = standin
    rendered = stages()
    result = apply_release(cluster, rendered, poll_s=0.01)
    applies = apply_calls(state)
    count = len(rendered["canary"]) + len(rendered["release"])
    # every object went through the server's dry run before any was persisted
    assert [c.query.get("dryRun") for c in applies[:count]] == ["All"] * count
    assert all("dryRun" not in c.query for c in applies[count:])
    assert all(c.query["fieldManager"] == "deploytool" and c.query["force"] == "true" for c in applies)
    # the real writes: canary stage, then (the Job passed) the release stage
    real = [c.path.rsplit("/", 2)[-2:] for c in applies[count:]]
    job = rendered["canary"][2]["metadata"]["name"]
    assert job.startswith("h200-qwen3-6-35b-a3b-fp8-qualify-r1-")
    assert real == [
        ["deployments", "h200-qwen3-6-35b-a3b-fp8-canary"],
        ["services", "h200-qwen3-6-35b-a3b-fp8-canary"],
        ["jobs", job],
        ["networkpolicies", "h200-qwen3-6-35b-a3b-fp8-ingress"],
        ["networkpolicies", "h200-qwen3-6-35b-a3b-fp8-qualify-ingress"],
        ["services", "h200-qwen3-6-35b-a3b-fp8"],
        ["poddisruptionbudgets", "h200-qwen3-6-35b-a3b-fp8"],
        ["deployments", "h200-qwen3-6-35b-a3b-fp8"],
    ]
    assert result.qualification == "passed" and result.promoted
    # the canary is gone, the Job (its verdict and log) stays, the release serves
    assert f"{DEPLOYMENTS}/h200-qwen3-6-35b-a3b-fp8-canary" not in state.objects
    assert f"/apis/batch/v1/namespaces/llm/jobs/{job}" in state.objects
    assert state.objects[f"{DEPLOYMENTS}/h200-qwen3-6-35b-a3b-fp8"]["spec"]["replicas"] == 3


def test_a_failed_qualification_leaves_the_previous_release_serving(standin):
    state, cluster, _ = standin
    apply_release(cluster, stages(IMAGE_1, 1), poll_s=0.01)
    state.job_verdict = "failed"
    with pytest.raises(DeployError, match="qualification failed: release 2 not promoted"):
        apply_release(cluster, stages(IMAGE_2, 2), poll_s=0.01)
    stable = state.objects[f"{DEPLOYMENTS}/h200-qwen3-6-35b-a3b-fp8"]
    assert stable["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE_1
    assert stable["spec"]["replicas"] == 3  # lent one copy's GPUs to the canary, got them back
    replica_patches = [
        c.body["spec"]["replicas"] for c in state.calls if c.content_type == "application/merge-patch+json"
    ]
    assert replica_patches == [2, 3]
    assert f"{DEPLOYMENTS}/h200-qwen3-6-35b-a3b-fp8-canary" not in state.objects


def test_a_retry_of_the_same_inputs_qualifies_again_other_inputs_get_their_own_job(standin):
    state, cluster, _ = standin
    apply_release(cluster, stages(IMAGE_1, 1), poll_s=0.01)
    state.job_verdict = "failed"
    with pytest.raises(DeployError):
        apply_release(cluster, stages(IMAGE_2, 2), poll_s=0.01)
    failed_job = stages(IMAGE_2, 2)["canary"][2]["metadata"]["name"]
    state.job_verdict = "succeeded"
    result = apply_release(cluster, stages(IMAGE_2, 2), poll_s=0.01)  # the same inputs: the old Job makes way
    deletes = [c.path for c in state.calls if c.method == "DELETE"]
    assert f"/apis/batch/v1/namespaces/llm/jobs/{failed_job}" in deletes
    assert result.promoted and state.objects[f"/apis/batch/v1/namespaces/llm/jobs/{failed_job}"][
        "status"
    ] == {"succeeded": 1}
    assert stages(IMAGE_3, 2)["canary"][2]["metadata"]["name"] != failed_job


def test_an_api_error_midway_leaves_no_canary_and_restores_capacity(standin):
    state, cluster, _ = standin
    apply_release(cluster, stages(IMAGE_1, 1), poll_s=0.01)
    state.break_writes.add("/api/v1/namespaces/llm/services/h200-qwen3-6-35b-a3b-fp8-canary")
    with pytest.raises(Exception, match="failed this write"):
        apply_release(cluster, stages(IMAGE_2, 2), poll_s=0.01)
    assert f"{DEPLOYMENTS}/h200-qwen3-6-35b-a3b-fp8-canary" not in state.objects
    stable = state.objects[f"{DEPLOYMENTS}/h200-qwen3-6-35b-a3b-fp8"]
    assert stable["spec"]["replicas"] == 3
    assert stable["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE_1


def test_a_refused_dry_run_changes_nothing(standin):
    state, cluster, _ = standin
    state.refuse.add("/apis/policy/v1/namespaces/llm/poddisruptionbudgets/h200-qwen3-6-35b-a3b-fp8")
    with pytest.raises(DeployError, match="dry run refused PodDisruptionBudget"):
        apply_release(cluster, stages(), poll_s=0.01)
    assert all(c.query.get("dryRun") == "All" for c in state.writes())
    assert state.objects == {}


def test_dry_run_only_persists_nothing(standin):
    state, cluster, _ = standin
    result = apply_release(cluster, stages(), dry_run_only=True)
    assert len(result.dry_run_ok) == 8 and not result.applied
    assert state.objects == {} and all(c.query.get("dryRun") == "All" for c in state.writes())


def test_rollback_returns_to_the_previous_pod_template_dry_run_first(standin):
    state, cluster, _ = standin
    apply_release(cluster, stages(IMAGE_1, 1), poll_s=0.01)
    apply_release(cluster, stages(IMAGE_2, 2), poll_s=0.01)
    kind = ("apps/v1", "Deployment")
    assert (
        release_status(cluster, namespace="llm", app="h200-qwen3-6-35b-a3b-fp8", kind=kind)["release"] == "2"
    )
    before = len(state.calls)
    result = rollback(cluster, namespace="llm", app="h200-qwen3-6-35b-a3b-fp8", kind=kind)
    patches = [c for c in state.calls[before:] if c.method == "PATCH"]
    assert [c.query.get("dryRun") for c in patches] == ["All", None]
    stable = state.objects[f"{DEPLOYMENTS}/h200-qwen3-6-35b-a3b-fp8"]
    assert stable["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE_1
    assert "pod-template-hash" not in stable["spec"]["template"]["metadata"]["labels"]
    assert result["rolled_back"] and "release 2 -> release 1" in result["plan"]
    status = release_status(cluster, namespace="llm", app="h200-qwen3-6-35b-a3b-fp8", kind=kind)
    assert status["release"] == "1" and status["image"] == IMAGE_1 and status["canary"] is False
    assert status["last_qualification"]["job"].startswith("h200-qwen3-6-35b-a3b-fp8-qualify-r2-")
    assert status["last_qualification"]["verdict"] == "passed"


def test_ome_rollback_points_back_at_the_previous_runtime(standin):
    state, cluster, _ = standin
    for release, image in enumerate([IMAGE_3, IMAGE_4, IMAGE_3, IMAGE_4, IMAGE_1, IMAGE_2], 1):
        apply_release(cluster, stages(image, release, flavor="ome"), poll_s=0.01)
    runtimes = sorted(p.rsplit("-r", 1)[-1] for p in state.objects if "/clusterservingruntimes/" in p)
    assert runtimes == ["3", "4", "5", "6"]  # the current release and retention (3) before it
    isvc_path = "/apis/ome.io/v1beta1/namespaces/llm/inferenceservices/h200-qwen3-6-35b-a3b-fp8"
    assert state.objects[isvc_path]["spec"]["runtime"]["name"] == "h200-qwen3-6-35b-a3b-fp8-r6"
    rollback(
        cluster, namespace="llm", app="h200-qwen3-6-35b-a3b-fp8", kind=("ome.io/v1beta1", "InferenceService")
    )
    assert state.objects[isvc_path]["spec"]["runtime"]["name"] == "h200-qwen3-6-35b-a3b-fp8-r5"
    assert state.objects[isvc_path]["metadata"]["annotations"]["deploytool.dev/image"] == IMAGE_1


def test_cli_apply_reads_a_kubeconfig_context_and_numbers_the_release(standin, tmp_path: Path, monkeypatch):
    state, cluster, url = standin
    apply_release(cluster, stages(IMAGE_1, 1), poll_s=0.01)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "other",
                "clusters": [
                    {"name": "standin", "cluster": {"server": url}},
                    {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}},
                ],
                "users": [{"name": "u", "user": {"token": "test-token"}}],
                "contexts": [
                    {"name": "standin", "context": {"cluster": "standin", "user": "u"}},
                    {"name": "other", "context": {"cluster": "nowhere", "user": "u"}},
                ],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    from deploytool.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "k8s",
                "apply",
                "--profile",
                PROFILE.name,
                "--image",
                IMAGE_2,
                "--qualify-image",
                QUALIFY,
                "--namespace",
                "llm",
                "--replicas",
                "3",
                "--context",
                "standin",
                "--dry-run",
                "--json",
            ]
        )
    assert exit_info.value.code in (0, None)
    dry = [c for c in apply_calls(state) if c.query.get("dryRun") == "All"][-6:]
    assert dry[-1].body["metadata"]["annotations"]["deploytool.dev/release"] == "2"  # current 1, so 2
    assert (
        state.objects[f"{DEPLOYMENTS}/h200-qwen3-6-35b-a3b-fp8"]["spec"]["template"]["spec"]["containers"][0][
            "image"
        ]
        == IMAGE_1
    )  # a dry run changed nothing


def test_leaderworkerset_rollback_reapplies_the_recorded_previous_release(standin):
    """lws keeps no previous revision once a rollout is done; deploytool records each promoted
    release's manifest (retention of them) and rolls back by applying the previous one."""
    state, cluster, _ = standin
    profile = ProfileStore([Path(__file__).resolve().parent / "profiles_k8s"]).get(
        "gb300x4x2-glm5.2-nvfp4-tp8"
    )

    def lws_stages(image: str, release: int):
        return render_stages(
            K8sRequest(
                profile=profile,
                image=image,
                toolchain=declared_toolchain(profile),
                release=release,
                replicas=2,
                namespace="llm",
                qualify_image=QUALIFY,
                retention=1,
            )
        )

    for release, image in enumerate([IMAGE_1, IMAGE_2, IMAGE_3, IMAGE_4], 1):
        apply_release(cluster, lws_stages(image, release), poll_s=0.01)
    history = sorted(p.rsplit("/", 1)[-1] for p in state.objects if "/configmaps/" in p)
    assert history == [
        "gb300x4x2-glm5-2-nvfp4-tp8-release-3",
        "gb300x4x2-glm5-2-nvfp4-tp8-release-4",
    ]  # retention 1
    lws_path = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/llm/leaderworkersets/gb300x4x2-glm5-2-nvfp4-tp8"
    before = len(state.calls)
    result = rollback(
        cluster,
        namespace="llm",
        app="gb300x4x2-glm5-2-nvfp4-tp8",
        kind=("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    )
    writes = [c for c in state.calls[before:] if c.method == "PATCH"]
    assert [c.query.get("dryRun") for c in writes] == ["All", None]
    leader = state.objects[lws_path]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][
        0
    ]
    assert leader["image"] == IMAGE_3 and "release 4 -> release 3" in result["plan"]


def _kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "standin",
                "clusters": [{"name": "standin", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "test-token"}}],
                "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "u"}}],
            }
        )
    )
    return path


def test_cli_status_and_rollback_print_json(standin, tmp_path: Path, monkeypatch, capsys):
    import json

    from deploytool.cli import main

    state, cluster, url = standin
    apply_release(cluster, stages(IMAGE_1, 1), poll_s=0.01)
    apply_release(cluster, stages(IMAGE_2, 2), poll_s=0.01)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path, url)))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["k8s", "status", "--profile", PROFILE.name, "--namespace", "llm", "--json"])
    assert exit_info.value.code in (0, None)
    status = json.loads(capsys.readouterr().out)
    assert status["release"] == "2" and status["image"] == IMAGE_2 and status["kind"] == "Deployment"
    with pytest.raises(SystemExit):
        main(["k8s", "rollback", "--profile", PROFILE.name, "--namespace", "llm", "--dry-run", "--json"])
    planned = json.loads(capsys.readouterr().out)
    assert planned["rolled_back"] is False and "release 2 -> release 1" in planned["plan"]
    stable = state.objects[f"{DEPLOYMENTS}/h200-qwen3-6-35b-a3b-fp8"]
    assert (
        stable["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE_2
    )  # a dry run changed nothing


def test_no_cluster_is_exit_3_with_what_to_do(tmp_path: Path, monkeypatch, capsys):
    from deploytool.cli import main

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(SystemExit) as exit_info:
        main(["k8s", "status", "--profile", PROFILE.name])
    assert exit_info.value.code == 3
    assert "--context" in capsys.readouterr().err
    # a cluster configured but not answering: also 3, naming the address
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path, "http://127.0.0.1:9")))
    with pytest.raises(SystemExit) as exit_info:
        main(["k8s", "status", "--profile", PROFILE.name])
    assert exit_info.value.code == 3 and "127.0.0.1:9" in capsys.readouterr().err
