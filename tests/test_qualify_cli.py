"""`deploytool qualify` end to end: exit 0 / 1 / 2 and the --json document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import free_port

from deploytool.cli import main
from deploytool.sim import SimSettings, serve_in_thread

FAST_FLAGS = ["--set", "preflight.ready_timeout_s=1", "--no-progress"]


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(["qualify", *args, *FAST_FLAGS])
    out = capsys.readouterr()
    return exit_info.value.code, out.out, out.err


def sim(**overrides):
    return serve_in_thread(
        SimSettings(
            startup_seconds=0,
            decode_tps=5000,
            prefill_tps=2_000_000,
            log_requests=False,
            default_chat_template_kwargs='{"enable_thinking": false}',
            enable_metrics=True,
            enable_cache_report=True,
            **overrides,
        ),
        wait_ready=True,
    )


def test_pass_is_exit_0_with_a_json_document(tmp_path: Path, capsys) -> None:
    with sim() as handle:
        code, out, _ = run_cli(
            [
                "--url",
                handle.url,
                "--suite",
                "preflight",
                "--suite",
                "tools",
                "--limit",
                "2",
                "--report",
                str(tmp_path / "r"),
                "--json",
            ],
            capsys,
        )
    assert code == 0
    doc = json.loads(out)  # stdout is the document and nothing else
    assert doc["verdict"] == "passed" and doc["exit_code"] == 0 and doc["limit"] == 2
    assert [s["name"] for s in doc["suites"]] == ["preflight", "tools"]
    assert doc["suites"][1]["figures"]["cases"] == 2
    assert (tmp_path / "r" / "results.json").is_file() and (tmp_path / "r" / "report.html").is_file()


def test_failed_gate_is_exit_1(tmp_path: Path, capsys) -> None:
    with sim(no_reasoning_field=True) as handle:
        code, out, _ = run_cli(
            ["--url", handle.url, "--suite", "contract", "--report", str(tmp_path)], capsys
        )
    assert code == 1
    assert "FAILED" in out and "contract" in out


def test_unreachable_endpoint_could_not_run_exit_6_with_a_clear_message(tmp_path: Path, capsys) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, _, err = run_cli(["--url", url, "--suite", "preflight", "--report", str(tmp_path)], capsys)
    assert code == 6  # could not run: not 2, which is a usage error
    assert "unreachable" in err and url in err
    assert json.loads((tmp_path / "results.json").read_text())["could_not_run"].startswith(f"endpoint {url}")
    # --json: the error object every command prints, with the results document as its result
    code, out, err = run_cli(
        ["--url", url, "--suite", "preflight", "--report", str(tmp_path / "j"), "--json"], capsys
    )
    body = json.loads(out)
    assert code == 6 and body["error"]["kind"] == "CouldNotRun" and body["error"]["exit_code"] == 6
    assert (
        body["error"]["message"].startswith(f"could not run: endpoint {url}")
        and str(tmp_path / "j") in body["error"]["hint"]
    )
    assert body["result"]["could_not_run"].startswith(f"endpoint {url}") and body["result"]["exit_code"] == 6
    assert "could not run" in err


def test_bad_arguments_are_exit_2(tmp_path: Path, capsys) -> None:
    code, _, err = run_cli(
        ["--url", "http://127.0.0.1:1", "--suite", "nope", "--report", str(tmp_path)], capsys
    )
    assert code == 2 and "unknown suite" in err
    code, _, err = run_cli(
        ["--url", "http://127.0.0.1:1", "--set", "gsm8k.min_accuracy", "--report", str(tmp_path)], capsys
    )
    assert code == 2 and "SUITE.SETTING=VALUE" in err
    code, _, err = run_cli(["--url", "not-a-url", "--report", str(tmp_path)], capsys)
    assert code == 2
