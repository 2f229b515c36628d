"""Who may call a server: SGLang's API-key rule, the simulator's copy of it, how the
key reaches SGLang without a command-line literal, and the clients that send it.

SGLang's own code runs here where it runs on a CPU: `decide_request_auth` (utils/auth.py) and
`ConfigArgumentMerger` (utils/server_args_config_parser.py) from the pinned wheel, loaded by
file so the rest of sglang (torch, GPUs) is never imported."""

from __future__ import annotations

import argparse
import importlib.util
import json
import secrets as stdlib_secrets
import sys
from pathlib import Path

import httpx
import pytest
from conftest import run_cli

from deploytool.checks.targets import Target
from deploytool.deploy import doctor
from deploytool.errors import EXIT_COULD_NOT_RUN, UsageError
from deploytool.image import patches
from deploytool.profiles import SecretRef, load_profile
from deploytool.qualify import Verdict, run_qualification
from deploytool.release import secrets as release_secrets
from deploytool.sim import SimSettings, serve_in_thread
from deploytool.sim.auth import allowed
from deploytool.sim.settings import build_parser

KEY = "k-" + stdlib_secrets.token_hex(12)


def sglang_module(relative: str):
    """One module file of the pinned sglang wheel, loaded on its own."""
    root = patches.unpacked_sources(patches.sglang_wheel("0.5.23", "3.11"))
    path = root / "sglang" / relative
    spec = importlib.util.spec_from_file_location(f"_sglang_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    # no bytecode beside the cached sources: they are read-only by convention, and a fork made
    # from them (tests/test_fork_image.py) would commit it and get a new commit, so a new image
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes
    return module


@pytest.fixture(scope="module")
def sglang_auth():
    return sglang_module("srt/utils/auth.py")


@pytest.fixture(scope="module")
def keyed_sim():
    # as the sim profile starts it (the sim's defaults are SGLang's): thinking off by default,
    # /metrics served, cached_tokens reported
    handle = serve_in_thread(
        SimSettings(
            startup_seconds=0,
            decode_tps=5000,
            prefill_tps=2_000_000,
            log_requests=False,
            api_key=KEY,
            default_chat_template_kwargs='{"enable_thinking": false}',
            enable_metrics=True,
            enable_cache_report=True,
        ),
        wait_ready=True,
    )
    yield handle
    handle.stop()


# -- the rule: SGLang's own decision against the simulator's ------------------------------------
CASES = [
    (method, path, header)
    for method in ("GET", "POST", "OPTIONS")
    for path in (
        "/health",
        "/health_generate",
        "/ready",
        "/metrics",
        "/v1/models",
        "/v1/chat/completions",
        "/server_info",
        "/get_model_info",
        "/flush_cache",
        "/healthz-not-really",
        "/x/health",
    )
    for header in (
        None,
        f"Bearer {KEY}",
        f"bearer {KEY}",
        f"Bearer {KEY}x",
        KEY,
        "Bearer",
        f"Basic {KEY}",
        "",
    )
]


def test_simulator_decides_like_sglang_for_every_path_and_header(sglang_auth) -> None:
    for method, path, header in CASES:
        for key in (KEY, None):
            want = sglang_auth.decide_request_auth(
                method=method,
                path=path,
                authorization_header=header,
                api_key=key,
                admin_api_key=None,
                auth_level=sglang_auth.AuthLevel.NORMAL,
            )
            assert allowed(method, path, header, key) == want.allowed, (method, path, header, key)
    # The refusal is 401 with {"error": "Unauthorized"}: read from SGLang's middleware itself.
    source = Path(sglang_auth.__file__).read_text()
    assert '"Unauthorized"' in source and "error_status_code: int = 401" in source


def test_keyed_simulator_refuses_without_the_key_with_sglangs_body(keyed_sim) -> None:
    url = keyed_sim.url
    for path in ("/v1/models", "/server_info"):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            response = httpx.get(url + path, headers=headers, timeout=5)
            assert response.status_code == 401 and response.json() == {"error": "Unauthorized"}, (
                path,
                headers,
            )
    chat = httpx.post(
        url + "/v1/chat/completions",
        json={"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]},
        timeout=5,
    )
    assert chat.status_code == 401
    assert httpx.get(url + "/health", timeout=5).status_code == 200  # probes need no key
    assert httpx.get(url + "/metrics", timeout=5).status_code == 200
    assert (
        httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=5).status_code
        == 200
    )


# -- how the key reaches the server: SGLang's --config ------------------------------------------
def test_sglang_reads_the_key_from_the_config_file_deploytool_writes(tmp_path: Path) -> None:
    merger_module = sglang_module("srt/utils/server_args_config_parser.py")
    tricky = "k\"ey: #with ' quotes\\and: colons ü"
    profile = load_profile("sim").model_copy(deep=True)
    profile.server.api_key = SecretRef(env="T_KEY")
    planned = release_secrets.plan_secrets(profile)
    values = release_secrets.resolve_values(planned, {"T_KEY": tricky})
    config = tmp_path / "deploytool-sglang-config.yaml"
    config.write_text(values["DEPLOYTOOL_SECRET_SGLANG_CONFIG"])
    # A parser with SGLang's option spelling (a store action, like --api-key in sglang's own).
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path")
    parser.add_argument("--api-key", type=str, default=None)
    parser.add_argument("--config")
    argv = ["--model-path", "m", *release_secrets.launch_args(planned)]
    assert argv[-2:] == ["--config", release_secrets.SGLANG_CONFIG_TARGET]
    argv[-1] = str(config)
    merged = merger_module.ConfigArgumentMerger(parser).merge_config_with_args(argv)
    assert parser.parse_args(merged).api_key == tricky
    # ... and the simulator reads the same file the same way (its image has no PyYAML: JSON-form).
    settings = SimSettings.from_env_and_args(["--config", str(config)], env={})
    assert settings.api_key == tricky


def test_sglang_has_no_environment_variable_for_the_key() -> None:
    """Why deploytool uses --config: the key is a plain field with no env fallback."""
    root = patches.unpacked_sources(patches.sglang_wheel("0.5.23", "3.11"))
    environ = (root / "sglang/srt/environ.py").read_text()
    assert "SGLANG_API_KEY" not in environ and "API_KEY = EnvStr" not in environ.replace("EXA_API_KEY", "")
    serving = (root / "sglang/srt/arg_groups/fields/serving.py").read_text()
    assert "    api_key: A[" in serving


def test_sim_parser_takes_api_key_and_revision_flags() -> None:
    args = build_parser().parse_args(["--api-key", "x", "--revision", "abc"])
    assert (args.api_key, args.revision) == ("x", "abc")


# -- clients send it ---------------------------------------------------------------------------
def test_qualify_passes_with_the_key_and_cannot_run_without(keyed_sim, tmp_path: Path) -> None:
    profile = load_profile("sim").model_copy(deep=True)
    profile.server.port = keyed_sim.settings.port
    suites = ["preflight", "contract"]
    good = run_qualification(
        Target(url=keyed_sim.url, profile=profile, api_key=KEY),
        suites=suites,
        report_dir=tmp_path / "good",
        overrides={"preflight": {"ready_timeout_s": 2}},
    )
    assert good.passed, good.summary_line()
    assert [s.verdict for s in good.suites] == [Verdict.PASSED, Verdict.PASSED]
    # The server describes itself with the key (as SGLang's /server_info does); the report does not.
    assert (
        keyed_sim.url
        and httpx.get(
            keyed_sim.url + "/server_info", timeout=5, headers={"Authorization": f"Bearer {KEY}"}
        ).text.count(KEY)
        >= 1
    )
    for path in (tmp_path / "good").rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
    refused = run_qualification(
        Target(url=keyed_sim.url, profile=profile),
        suites=suites,
        report_dir=tmp_path / "refused",
        overrides={"preflight": {"ready_timeout_s": 2}},
    )
    assert refused.exit_code == EXIT_COULD_NOT_RUN and "401 Unauthorized" in (refused.could_not_run or "")


def test_the_health_probe_between_suites_sends_the_key(keyed_sim) -> None:
    """The probe before a suite that follows a failure: a keyed server refuses a chat
    without the key, so a probe without it would call a healthy server dead."""
    import asyncio

    from deploytool.qualify.resilience import health_probe
    from deploytool.server.client import EndpointClient

    async def probe(key: str | None) -> str | None:  # through the run's client, as the runner sends it
        async with EndpointClient(keyed_sim.url, api_key=key) as client:
            return await health_probe(client, model, 5)

    model = httpx.get(
        keyed_sim.url + "/v1/models", timeout=5, headers={"Authorization": f"Bearer {KEY}"}
    ).json()["data"][0]["id"]
    assert asyncio.run(probe(KEY)) is None
    without = asyncio.run(probe(None))
    assert without is not None and "401" in without


def test_a_key_on_the_command_line_is_refused(keyed_sim, tmp_path: Path) -> None:
    out = run_cli(
        "qualify",
        "--url",
        keyed_sim.url,
        "--api-key",
        KEY,
        "--suite",
        "contract",
        "--report",
        str(tmp_path / "r"),
    )
    assert out.returncode == 2 and "--api-key-file" in out.stderr and not (tmp_path / "r").exists()
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    ok = run_cli(
        "qualify",
        "--url",
        keyed_sim.url,
        "--api-key-file",
        str(key_file),
        "--suite",
        "contract",
        "--json",
        "--report",
        str(tmp_path / "r2"),
    )
    assert ok.returncode == 0, ok.stderr
    assert KEY not in ok.stdout and KEY not in ok.stderr
    via_env = run_cli(
        "qualify",
        "--url",
        keyed_sim.url,
        "--suite",
        "contract",
        "--json",
        "--report",
        str(tmp_path / "r3"),
        env={release_secrets.API_KEY_ENV: KEY},
    )
    assert via_env.returncode == 0, via_env.stderr


def test_client_api_key_sources(tmp_path: Path) -> None:
    assert release_secrets.client_api_key(env={}) is None
    assert release_secrets.client_api_key(env={"DEPLOYTOOL_API_KEY": " k1 "}) == "k1"
    with pytest.raises(UsageError, match="--api-key-file"):
        release_secrets.client_api_key(given_on_command_line="k", env={})
    with pytest.raises(UsageError, match="cannot be read"):
        release_secrets.client_api_key(key_file=tmp_path / "absent", env={})


def test_redaction_of_a_servers_self_description() -> None:
    info = {
        "api_key": KEY,
        "admin_api_key": None,
        "port": 1,
        "launch_command": f"python3 -m sglang.launch_server --model-path m --api-key {KEY} --port 1",
        "nested": [{"note": f"key={KEY}"}, "--api-key=other"],
    }
    clean = release_secrets.redact(info, [KEY])
    assert KEY not in json.dumps(clean) and "other" not in json.dumps(clean)
    assert clean["api_key"] == "<redacted>" and clean["admin_api_key"] is None and clean["port"] == 1
    assert clean["launch_command"].endswith("--api-key <redacted> --port 1")


# -- doctor --------------------------------------------------------------------------------------
class _Container:
    def __init__(self, name: str, ip: str, key: str | None) -> None:
        self.name = name
        self.labels = {
            "dev.deploytool.host-ip": ip,
            "dev.deploytool.slot": "cpu",
            "dev.deploytool.release": "1",
            "dev.deploytool.host-port": "30000",
            "dev.deploytool.instance": "default",
        }
        if key is not None:
            self.labels["dev.deploytool.api-key"] = key


class _Containers:
    def __init__(self, items: list[_Container]) -> None:
        self.items = items

    def list(self, filters: dict) -> list[_Container]:
        assert filters == {"label": "dev.deploytool.managed=true"}
        return self.items


class _Client:
    def __init__(self, items: list[_Container]) -> None:
        self.containers = _Containers(items)


def test_doctor_reports_releases_open_beyond_loopback_without_a_key() -> None:
    check = doctor.check_open_releases(
        _Client(
            [
                _Container("a", "127.0.0.1", "none"),
                _Container("b", "0.0.0.0", "required"),
                _Container("c", "0.0.0.0", "none"),
                _Container("d", "10.1.2.3", None),
                _Container("e", "::1", "none"),
            ]
        )
    )
    assert check.status == "warn"
    assert [r.split(" ")[0] for r in check.data["releases"]] == ["c", "d"]
    assert doctor.check_open_releases(_Client([_Container("a", "127.0.0.1", "none")])).status == "pass"


def test_bench_sends_the_key_and_keeps_it_out_of_its_results(keyed_sim, tmp_path: Path) -> None:
    from deploytool.bench import build_method, run_bench

    method = build_method(
        quick=True,
        warmup_requests=1,
        warmup_output_tokens=8,
        decode_requests=2,
        decode_output_tokens=20,
        decode_prompt_tokens=64,
        load_concurrency=[2],
        load_requests_per_slot=1,
        load_output_tokens=20,
        prefill_prompt_tokens=[2000],
        prefill_prompts_each=1,
        request_timeout_s=20,
        run_timeout_s=60,
    )
    run = run_bench(
        Target(url=keyed_sim.url, profile=None, api_key=KEY),
        method=method,
        report_dir=tmp_path / "bench",
        progress=False,
    )
    assert run.errors_total == 0 and run.figure("decode_c1_tps").value > 0
    for path in (tmp_path / "bench").rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
    refused = run_bench(
        Target(url=keyed_sim.url, profile=None), method=method, report_dir=tmp_path / "no", progress=False
    )
    assert refused.errors_total == refused.requests_total > 0
