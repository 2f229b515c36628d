"""The monitor's generated Prometheus files: promtool (Debian's, the same package the monitor's
image installs) accepts the configuration and every rule; the rules and the dashboard cover the
same figures as `top`; the scrape targets follow the engine's releases and the slot's pointer."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from deploytool.host.releases import Release
from deploytool.monitor import prometheus
from deploytool.monitor.figures import FIGURES, quantile
from deploytool.profiles import ProfileStore
from deploytool.release import scrape_targets
from deploytool.release.state import SlotPointers, write_pointers

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian: apt-get install prometheus)"
)
PROFILE = """\
name: watched
extends: sim
qualify:
  preflight: {expect: {min_accept_length: 1.7}}
monitor: {ttft_p99_s: 1.5, tpot_p99_s: 0.05}
"""


@pytest.fixture
def profiles(tmp_path: Path) -> list:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "watched.yaml").write_text(PROFILE)
    store = ProfileStore([folder])
    return [store.get("watched"), store.get("sim")]


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)


@needs_promtool
def test_promtool_accepts_the_rules_and_the_config(tmp_path: Path, profiles: list) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(prometheus.rules_document(profiles), sort_keys=False, width=1000))
    checked = _promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"{len(FIGURES) + len(prometheus.alerting_rules(profiles))} rules found" in checked.stdout
    (tmp_path / "targets.json").write_text("[]")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            prometheus.config(
                scrape_interval_s=5,
                targets_path=str(tmp_path / "targets.json"),
                rules_path=str(rules),
                cards_exporter="127.0.0.1:9400",
            )
        )
    )
    checked = _promtool("check", "config", str(config))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_promtool_refuses_a_broken_rule(tmp_path: Path) -> None:
    """The check above can fail: a rule with a bad expression is refused."""
    rules = tmp_path / "rules.yml"
    rules.write_text(
        yaml.safe_dump(
            {"groups": [{"name": "x", "rules": [{"record": "deploytool:x", "expr": "sum by (("}]}]}
        )
    )
    assert _promtool("check", "rules", str(rules)).returncode != 0


@needs_promtool
def test_recording_rules_compute_the_figures_from_series(tmp_path: Path) -> None:
    """promtool's rule unit test: a minute of synthetic SGLang series in, the recorded figures out
    (the same arithmetic as top's figures, by hand: 2 requests/s, a quarter of the prompt cached,
    TTFT p50 at rank 15 of 30 inside the 0.5 bucket: 0.5 * 15 / 20, as top's quantile says)."""
    top_p50 = quantile(0.5, {0.5: 20, 1.0: 30, math.inf: 30})
    assert top_p50 == 0.375
    rules = tmp_path / "rules.yml"
    rules.write_text(
        yaml.safe_dump({"groups": [{"name": "f", "rules": prometheus.recording_rules()}]}, width=1000)
    )
    labels = 'slot="cpu",release="2",profile="sim",card="cpu"'
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    {
                        "series": f'sglang:num_requests_total{{{labels},is_streaming="true"}}',
                        "values": "0+30x8",
                    },
                    {"series": f"sglang:prompt_tokens_total{{{labels}}}", "values": "0+300x8"},
                    {"series": f"sglang:cached_tokens_total{{{labels}}}", "values": "0+75x8"},
                    {
                        "series": f'sglang:time_to_first_token_seconds_bucket{{{labels},le="0.5"}}',
                        "values": "0+20x8",
                    },
                    {
                        "series": f'sglang:time_to_first_token_seconds_bucket{{{labels},le="1"}}',
                        "values": "0+30x8",
                    },
                    {
                        "series": f'sglang:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}}',
                        "values": "0+30x8",
                    },
                    {"series": f'sglang:num_queue_reqs{{{labels},tp_rank="0"}}', "values": "3x8"},
                ],
                "promql_expr_test": [
                    {
                        "expr": "deploytool:requests_per_s",
                        "eval_time": "2m",
                        "exp_samples": [{"labels": f"deploytool:requests_per_s{{{labels}}}", "value": 2}],
                    },
                    {
                        "expr": "deploytool:prefix_hit_rate",
                        "eval_time": "2m",
                        "exp_samples": [{"labels": f"deploytool:prefix_hit_rate{{{labels}}}", "value": 0.25}],
                    },
                    {
                        "expr": "deploytool:queued",
                        "eval_time": "2m",
                        "exp_samples": [{"labels": f"deploytool:queued{{{labels}}}", "value": 3}],
                    },
                    {
                        "expr": "deploytool:ttft_p50_s",
                        "eval_time": "2m",
                        "exp_samples": [{"labels": f"deploytool:ttft_p50_s{{{labels}}}", "value": top_p50}],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False, width=1000))
    checked = _promtool("test", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_alerts_follow_each_profile_s_promises(profiles: list) -> None:
    alerts = prometheus.alerting_rules(profiles)
    names = [a["alert"] for a in alerts]
    assert {
        "DeploytoolReleaseDown",
        "DeploytoolKvPoolNearFull",
        "DeploytoolQueueGrowing",
        "DeploytoolCardThrottling",
    } <= set(names)
    per_profile = {
        (a["alert"], a["labels"].get("profile")): a["expr"] for a in alerts if "profile" in a["labels"]
    }
    assert per_profile == {
        ("DeploytoolAcceptLengthLow", "watched"): 'deploytool:spec_accept_length{profile="watched"} < 1.7',
        ("DeploytoolTTFTp99AboveTarget", "watched"): 'deploytool:ttft_p99_s{profile="watched"} > 1.5',
        ("DeploytoolTPOTp99AboveTarget", "watched"): 'deploytool:tpot_p99_s{profile="watched"} > 0.05',
    }  # sim promises none of them


def test_dashboard_has_a_panel_per_figure() -> None:
    board = prometheus.dashboard()
    exprs = [p["targets"][0]["expr"] for p in board["panels"]]
    assert exprs == [f'deploytool:{f.key}{{slot=~"$slot"}}' for f in FIGURES]
    json.dumps(board)  # a JSON model


def _release(
    slot: str, number: int, port: int, running: bool = True, gpus: list[str] | None = None
) -> Release:
    return Release(
        slot=slot,
        release=number,
        profile="sim",
        image="img",
        container_id=f"c{number}",
        container_name=f"n{number}",
        state="running" if running else "exited",
        health="healthy",
        host_port=port,
        gpus=gpus or [],
        simulator=True,
        created="",
    )


def test_scrape_targets_follow_the_pointer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOYTOOL_HOME", str(tmp_path / "home"))
    releases = [
        _release("cpu", 1, 30001),
        _release("cpu", 2, 30002),
        _release("gpu-a", 4, 30004, gpus=["GPU-1", "GPU-2"]),
        _release("gpu-b", 1, 30005, running=False),
    ]
    assert scrape_targets.write_if_monitored(releases) is None  # no monitor set up: nothing written
    assert not scrape_targets.targets_file().exists()
    write_pointers("cpu", SlotPointers(current=1, previous=None))  # release 2 started, not yet cut over
    path = scrape_targets.write_targets(releases)
    groups = json.loads(path.read_text())
    assert [
        (g["targets"], g["labels"]["slot"], g["labels"]["release"], g["labels"]["card"]) for g in groups
    ] == [(["127.0.0.1:30001"], "cpu", "1", "cpu"), (["127.0.0.1:30004"], "gpu-a", "4", "GPU-1,GPU-2")]
    write_pointers("cpu", SlotPointers(current=2, previous=1))  # the cut-over
    scrape_targets.write_if_monitored(releases)
    assert json.loads(path.read_text())[0]["targets"] == ["127.0.0.1:30002"]


@needs_promtool
def test_alerts_fire_on_the_faults_they_name(tmp_path: Path, profiles: list) -> None:
    """promtool's alert unit tests over the generated rules: a KV pool full for minutes, the
    watched profile's draft accepting fewer tokens than it expects, its TTFT p99 above target,
    a release that stops answering, one whose /health fails while /metrics answers, a card held
    down for heat; and none while all is well."""
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(prometheus.rules_document(profiles), sort_keys=False, width=1000))
    lab = 'slot="gpu-a",release="3",profile="watched",card="GPU-1"'
    ok = 'slot="cpu",release="1",profile="sim",card="cpu"'
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": [
                    {"series": f'sglang:token_usage{{{lab},tp_rank="0"}}', "values": "0.97x30"},
                    {"series": f'sglang:token_usage{{{ok},tp_rank="0"}}', "values": "0.5x30"},
                    # 1.2 tokens per verify step against the 1.7 the profile expects
                    {"series": f"sglang:generation_tokens_total{{{lab}}}", "values": "0+120x30"},
                    {"series": f"sglang:spec_verify_calls_total{{{lab}}}", "values": "0+100x30"},
                    # every first token in the 2-4 s bucket: p99 near 4 s against the 1.5 s target
                    {
                        "series": f'sglang:time_to_first_token_seconds_bucket{{{lab},le="2"}}',
                        "values": "0x30",
                    },
                    {
                        "series": f'sglang:time_to_first_token_seconds_bucket{{{lab},le="4"}}',
                        "values": "0+10x30",
                    },
                    {
                        "series": f'sglang:time_to_first_token_seconds_bucket{{{lab},le="+Inf"}}',
                        "values": "0+10x30",
                    },
                    {
                        "series": f'up{{job="{prometheus.RELEASES_JOB}",instance="127.0.0.1:30001",{ok}}}',
                        "values": "1x4 0x26",
                    },
                    {
                        "series": f'up{{job="{prometheus.HEALTH_JOB}",instance="127.0.0.1:30001",{ok}}}',
                        "values": "1x4 0x26",
                    },
                    # the watched release: /metrics answers, /health does not (a wedged scheduler)
                    {
                        "series": f'up{{job="{prometheus.RELEASES_JOB}",instance="127.0.0.1:30003",{lab}}}',
                        "values": "1x30",
                    },
                    {
                        "series": f'up{{job="{prometheus.HEALTH_JOB}",instance="127.0.0.1:30003",{lab}}}',
                        "values": "1x4 0x26",
                    },
                    {
                        "series": f'{prometheus.THROTTLE_METRIC}{{gpu="0",UUID="GPU-1"}}',
                        "values": "64x30",
                    },  # HW thermal
                    {
                        "series": f'{prometheus.THROTTLE_METRIC}{{gpu="1",UUID="GPU-2"}}',
                        "values": "1x30",
                    },  # idle only
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "10m",
                        "alertname": "DeploytoolKvPoolNearFull",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "page",
                                    "slot": "gpu-a",
                                    "release": "3",
                                    "profile": "watched",
                                    "card": "GPU-1",
                                },
                                "exp_annotations": {
                                    "summary": "slot gpu-a: KV pool 97% full for 5 minutes",
                                    "description": "New requests wait or retract; more cards, a shorter context or a smaller running limit.",
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "14m",
                        "alertname": "DeploytoolAcceptLengthLow",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "page",
                                    "slot": "gpu-a",
                                    "release": "3",
                                    "profile": "watched",
                                    "card": "GPU-1",
                                },
                                "exp_annotations": {
                                    "summary": "slot gpu-a: accept length 1.2 below watched's 1.7",
                                    "description": "qualify.preflight.expect.min_accept_length: the draft model no longer pays off.",
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "10m",
                        "alertname": "DeploytoolReleaseDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "page",
                                    "job": prometheus.RELEASES_JOB,
                                    "instance": "127.0.0.1:30001",
                                    "slot": "cpu",
                                    "release": "1",
                                    "profile": "sim",
                                    "card": "cpu",
                                },
                                "exp_annotations": {
                                    "summary": "slot cpu: release 1 does not answer /metrics",
                                    "description": "The release the slot serves (its pointer) fails its scrape: stopped, restarting or unhealthy.",
                                },
                            }
                        ],
                    },
                    # the stopped one pages as down only; the wedged one as unhealthy
                    {
                        "eval_time": "10m",
                        "alertname": "DeploytoolReleaseUnhealthy",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "page",
                                    "job": prometheus.HEALTH_JOB,
                                    "instance": "127.0.0.1:30003",
                                    "slot": "gpu-a",
                                    "release": "3",
                                    "profile": "watched",
                                    "card": "GPU-1",
                                },
                                "exp_annotations": {
                                    "summary": "slot gpu-a: release 3 fails its health check",
                                    "description": prometheus.alerting_rules([])[1]["annotations"][
                                        "description"
                                    ],
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "2m",
                        "alertname": "DeploytoolReleaseUnhealthy",
                        "exp_alerts": [],
                    },  # not yet 1 minute
                    {
                        "eval_time": "10m",
                        "alertname": "DeploytoolTTFTp99AboveTarget",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "page",
                                    "slot": "gpu-a",
                                    "release": "3",
                                    "profile": "watched",
                                    "card": "GPU-1",
                                },
                                "exp_annotations": {
                                    "summary": "slot gpu-a: TTFT p99 3.98s above watched's 1.5 s",
                                    "description": "monitor.ttft_p99_s of profile watched.",
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "10m",
                        "alertname": "DeploytoolCardThrottling",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "page", "gpu": "0", "UUID": "GPU-1"},
                                "exp_annotations": {
                                    "summary": "card 0 (GPU-1) held down for heat or power",
                                    "description": "NVML clock event reasons: HW slowdown, SW/HW thermal slowdown or power brake.",
                                },
                            }
                        ],
                    },
                    {"eval_time": "10m", "alertname": "DeploytoolQueueGrowing", "exp_alerts": []},
                    {
                        "eval_time": "1m",
                        "alertname": "DeploytoolKvPoolNearFull",
                        "exp_alerts": [],
                    },  # not yet 5 minutes
                ],
            }
        ],
    }
    path = tmp_path / "tests.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False, width=1000))
    checked = _promtool("test", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_monitor_up_refuses_bad_settings_before_touching_the_engine() -> None:
    from conftest import run_cli

    for args, words in (
        (["--retention", "two weeks"], "not a Prometheus duration"),
        (["--cards-exporter", "http://x:9400/metrics"], "not HOST:PORT"),
        (["--port", "70000"], "not a TCP port"),
    ):
        result = run_cli("monitor", "up", *args, "--json")
        error = json.loads(result.stdout)["error"]
        assert result.returncode == 2 and error["kind"] == "UsageError" and words in error["message"], (
            result.stdout
        )


def test_without_apt_the_debs_are_asked_for_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from deploytool.errors import DeployError
    from deploytool.monitor import stack

    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(DeployError) as caught:
        stack.fetch_debs(tmp_path / "context")
    assert "apt-get is not on this host" in caught.value.message
    assert "prometheus" in caught.value.hint and str(tmp_path / "context" / "debs") in caught.value.hint
