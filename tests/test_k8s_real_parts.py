"""The parts of the Kubernetes rendering that run as code, run for real: the JIT cache wipe
rule in a real container, the qualify Job's wait script against a loopback server, the Job's
command parsed by deploytool's own CLI, a multi-node argv through SGLang's own parser, and the
offline validator checked against kubernetes-validate's own entry point."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from keyed_profile import keyed

from deploytool.k8s import K8sRequest, declared_toolchain, pod, render_manifests, render_stages
from deploytool.k8s import release as rel
from deploytool.k8s.validate import validate_builtin
from deploytool.profiles import ProfileStore
from deploytool.release import secrets

HERE = Path(__file__).resolve().parent
IMAGE = "registry.example/deploytool/sglang@sha256:" + "a" * 64
QUALIFY = "registry.example/deploytool/deploytool@sha256:" + "b" * 64
STORE = ProfileStore([HERE / "profiles_k8s"])


def request(name: str, **kw) -> K8sRequest:
    profile = STORE.get(name)
    return K8sRequest(
        profile=profile, image=IMAGE, toolchain=declared_toolchain(profile), qualify_image=QUALIFY, **kw
    )


def _pod(req: K8sRequest) -> dict:
    deployment = next(
        o
        for o in render_manifests(req)
        if o["kind"] == "Deployment" and not o["metadata"]["name"].endswith("-canary")
    )
    return deployment["spec"]["template"]["spec"]


def test_cache_wipe_rule_runs_in_a_real_container(docker_engine, tmp_path: Path):
    import shlex

    from conftest import BASE_IMAGE

    init = _pod(request("h200-qwen3.6-35b-a3b-fp8"))["initContainers"][0]
    env = {e["name"]: e["value"] for e in init["env"]}
    cache = tmp_path / "cache"
    cache.mkdir()
    # the init container's shell script, in a throwaway container of the engine's (its output
    # read from a file it writes: a container that exits at once can lose its log)
    assert init["command"][:2] == ["/bin/sh", "-c"] and len(init["command"]) == 3

    def run(fingerprint: str) -> str:
        return docker_engine.run_throwaway(
            BASE_IMAGE,
            f"export DEPLOYTOOL_FINGERPRINT={shlex.quote(fingerprint)}\n{init['command'][2]}",
            volume=str(cache),
            mount=rel.CACHE_MOUNT,
        )

    first = run(env["DEPLOYTOOL_FINGERPRINT"])
    stamp = (cache / rel.FINGERPRINT_FILE).read_text()
    assert "wiping" in first and stamp.startswith(env["DEPLOYTOOL_FINGERPRINT"])
    assert "driver=" in stamp  # this machine has no NVIDIA driver: 'driver=none'
    (cache / "triton").mkdir()
    (cache / "triton" / "kernel.cubin").write_bytes(b"\0" * 64)
    assert "unchanged, kept" in run(env["DEPLOYTOOL_FINGERPRINT"])
    assert (cache / "triton" / "kernel.cubin").exists()
    changed = json.dumps({**json.loads(env["DEPLOYTOOL_FINGERPRINT"]), "flashinfer": "0.7.3"}, sort_keys=True)
    assert "wiping" in run(changed)
    assert not (cache / "triton").exists()
    assert (cache / rel.FINGERPRINT_FILE).read_text().startswith(changed)


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def _wait_script(req: K8sRequest) -> list[str]:
    job = next(o for o in render_stages(req)["canary"] if o["kind"] == "Job")
    wait = job["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert wait[:2] == ["python3", "-c"]
    return wait


def test_qualify_job_waits_for_the_canary_health_then_gives_up():
    req = request("h200-qwen3.6-35b-a3b-fp8")
    wait = _wait_script(req)
    assert wait[3].endswith("-canary.default.svc:30000/health") and wait[4] == str(
        req.profile.health.budget_seconds()
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    # shutdown() waits for serve_forever to look at its flag, once a poll_interval (0.5 s by default)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/health"
        ok = subprocess.run(
            [sys.executable, "-c", wait[2], url, "30"], capture_output=True, text=True, timeout=60
        )
        assert ok.returncode == 0
    finally:
        server.shutdown()
    # its own verdict on its 1 s budget (a script that waited on regardless hits run's timeout);
    # the socket still listens, unserved: a try that would hang is cut at what is left of the budget
    gone = subprocess.run(
        [sys.executable, "-c", wait[2], url, "1"], capture_output=True, text=True, timeout=60
    )
    assert gone.returncode == 1 and "never became healthy" in gone.stderr


def test_qualify_job_command_is_one_deploytool_accepts():
    import typer.main

    from deploytool.cli import app

    job = next(o for o in render_stages(request("b300x8-glm5.2-nvfp4-tp8"))["canary"] if o["kind"] == "Job")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["deploytool", "qualify"]
    qualify = typer.main.get_command(app).commands["qualify"]
    ctx = qualify.make_context("qualify", list(command[2:]))  # raises on an unknown option
    assert ctx.params["url"].startswith("http://") and ctx.params["profile"] == "b300x8-glm5.2-nvfp4-tp8"
    assert ctx.params["no_progress"] is True
    # with an API key: the key's file, an option qualify takes
    profile = keyed(STORE.get("b300x8-glm5.2-nvfp4-tp8"))
    keyed_req = K8sRequest(
        profile=profile, image=IMAGE, toolchain=declared_toolchain(profile), qualify_image=QUALIFY
    )
    job = next(o for o in render_stages(keyed_req)["canary"] if o["kind"] == "Job")
    ctx = qualify.make_context(
        "qualify", list(job["spec"]["template"]["spec"]["containers"][0]["command"][2:])
    )
    assert str(ctx.params["api_key_file"]) == pod.API_KEY_FILE


def test_multinode_argv_passes_sglangs_own_parser(sglang_parser_python: Path):
    """The leader's argv with LeaderWorkerSet's values filled in, through sglang 0.5.23's parser
    (deploytool's parser venv, which `check` finds made by the fixture)."""
    from deploytool.image import flagcheck

    req = request("gb300x4x2-glm5.2-nvfp4-tp8")
    lws = next(
        o
        for o in render_manifests(req)
        if o["kind"] == "LeaderWorkerSet" and not o["metadata"]["name"].endswith("-canary")
    )
    argv = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["command"]
    filled = [
        a.replace("$(LWS_GROUP_SIZE)", "2")
        .replace("$(LWS_WORKER_INDEX)", "1")
        .replace("$(LWS_LEADER_ADDRESS)", "10.0.0.7")
        for a in argv
    ]
    profile = req.profile
    args = {k: v for k, v in profile.server.args.items() if k not in rel.MULTINODE_FLAGS}
    args.update({"nnodes": 2, "node-rank": 1, "dist-init-addr": f"10.0.0.7:{rel.DIST_INIT_PORT}"})
    filled_profile = profile.model_copy(update={"server": profile.server.model_copy(update={"args": args})})
    assert filled_profile.launch_argv() == filled
    result = flagcheck.check(filled_profile, use_image=False)
    assert result.ok, [(f.flag, f.status, f.message) for f in result.failures] or result.parser_error
    stored = {f.flag: f.stored for f in result.findings}
    assert stored["--nnodes"] == 2 and stored["--node-rank"] == 1 and stored["--tp-size"] == 8


def test_offline_validator_agrees_with_kubernetes_validate():
    """validate.py keeps kubernetes-validate's validators cached; its verdict must be the
    package's own (kubernetes_validate.validate, strict) on good and bad objects."""
    import kubernetes_validate

    objects = render_manifests(request("rtx5090-qwen3.6-35b-a3b-nvfp4"))
    broken = json.loads(json.dumps(objects))
    broken[0]["spec"]["replicas"] = "three"
    broken[1]["spec"]["ports"][0]["portt"] = 1
    for obj in objects + broken[:2]:
        ours = (
            validate_builtin(obj, "1.33")
            if obj["apiVersion"] in ("v1", "apps/v1", "batch/v1", "policy/v1")
            else None
        )
        if ours is None:
            continue
        try:
            kubernetes_validate.validate(obj, "1.33.0", strict=True)
            theirs_ok = True
        except kubernetes_validate.ValidationError:
            theirs_ok = False
        assert (ours == []) == theirs_ok, (obj["kind"], ours)
    assert validate_builtin(broken[0], "1.33") and validate_builtin(broken[1], "1.33")


def test_api_key_reaches_sglang_in_a_config_file_never_argv_or_env(
    tmp_path: Path, sglang_referee_python: Path
):
    profile = keyed(STORE.get("h200-qwen3.6-35b-a3b-fp8"))
    req = K8sRequest(
        profile=profile, image=IMAGE, toolchain=declared_toolchain(profile), qualify_image=QUALIFY
    )
    stages = render_stages(req)
    pod_spec = next(o for o in stages["release"] if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    server = pod_spec["containers"][0]
    assert server["command"][-2:] == ["--config", pod.SGLANG_CONFIG]
    assert "--api-key" not in server["command"]
    assert all(e["name"] != secrets.API_KEY_ENV for e in server["env"])
    # the hub token as a file, where HF_TOKEN_PATH points, as on a Docker host
    assert {"name": "HF_TOKEN_PATH", "value": secrets.HF_TOKEN_TARGET} in server["env"]
    hf = next(v for v in pod_spec["volumes"] if v["name"] == "hf-token")["secret"]
    assert hf["secretName"] == "deploytool" and hf["items"] == [{"key": "hf_token", "path": "hf_token"}]
    assert {"name": "hf-token", "mountPath": secrets.SECRETS_DIR, "readOnly": True} in server["volumeMounts"]
    secret_volume = next(v for v in pod_spec["volumes"] if v["name"] == "api-key")["secret"]
    assert secret_volume["secretName"] == "deploytool" and secret_volume["items"] == [
        {"key": "api_key", "path": "api_key"}
    ]
    job_pod = next(o for o in stages["canary"] if o["kind"] == "Job")["spec"]["template"]["spec"]
    job = job_pod["containers"][0]
    # the Job reads the key from a file its user's group may read (fsGroup), not from its environment
    assert [e for e in job["env"] if "valueFrom" in e] == []
    assert job["command"][-2:] == ["--api-key-file", pod.API_KEY_FILE]
    key_volume = next(v for v in job_pod["volumes"] if v["name"] == "api-key")["secret"]
    assert key_volume["defaultMode"] == 0o440 and job_pod["securityContext"]["fsGroup"] == 65534
    assert validate_builtin(next(o for o in stages["release"] if o["kind"] == "Deployment"), "1.33") == []
    # the init container's script, run: a key with YAML-special characters survives
    init = next(c for c in pod_spec["initContainers"] if c["name"] == "api-key-config")
    key = 'sk-"quoted": #not-a-comment\\'
    (tmp_path / "api_key").write_text(key + "\n")
    config = tmp_path / "sglang-config.yaml"
    subprocess.run(
        [sys.executable, "-c", init["command"][2], str(tmp_path / "api_key"), str(config)], check=True
    )
    import yaml

    assert yaml.safe_load(config.read_text()) == {"api-key": key}
    # and SGLang's own parser takes it from --config: its config reader needs PyYAML, which the
    # bare parser venv lacks and the referee environment (a superset) has, as the image does
    probe = (
        "import sys\nfrom sglang.srt.server_args import prepare_server_args\n"
        "print(repr(prepare_server_args(['--model-path', '/models/x', '--config', sys.argv[1]]).api_key))"
    )
    out = subprocess.run(
        [str(sglang_referee_python), "-c", probe, str(config)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and out.stdout.strip(), out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == repr(key), out.stderr[-2000:]
