"""Built qualify results.json documents for the cutover tests: the figures the comparison reads
(bench figures with per-request samples, GSM8K outcomes, needle, tools, vision, stress)."""

from __future__ import annotations

import random


def bench_figure(key, label, unit, better, centre, n=8, passes=3, jitter=0.03, seed=0):
    rng = random.Random(seed)
    samples = [[centre * (1 + rng.uniform(-jitter, jitter)) for _ in range(n)] for _ in range(passes)]
    return {
        "key": key,
        "label": label,
        "unit": unit,
        "better": better,
        "value": centre,
        "samples": samples,
        "spread": [centre * (1 - jitter), centre * (1 + jitter)],
    }


def results(
    decode=400.0,
    *,
    seed=0,
    gsm8k="1111111111",
    needle=(1.0, 1.0),
    tools=(56, 56),
    vision=(6, 6),
    stress_errors=(),
    verdict="passed",
    version="0.5.17",
    decode_tps_flag=None,
    gates_failed=(),
):
    perf = {
        "bench_figures": [
            bench_figure("decode_c1_tps", "decode, 1 request", "tok/s", "higher", decode, seed=seed),
            bench_figure(
                "load_c4_per_request_tps",
                "decode, 4 concurrent, per request",
                "tok/s",
                "higher",
                decode * 0.97,
                seed=seed + 1,
            ),
            bench_figure("ttft_c1_s", "time to first token, 1 request", "s", "lower", 0.02, seed=seed + 2),
        ]
    }
    info = {"version": version, "port": 1234 + seed, "startup_time": seed, "chunked_prefill_size": 8192}
    if decode_tps_flag is not None:
        info["sim_settings"] = {"decode_tps": decode_tps_flag}
    gates = [
        {"name": name, "passed": False, "measured": 0.5, "threshold": 0.9, "comparison": ">=", "unit": ""}
        for name in gates_failed
    ]
    doc = {
        "schema": "deploytool.qualify/v1",
        "verdict": verdict,
        "incomplete": False,
        "could_not_run": None,
        "summary": f"qualify {verdict.upper()}",
        "started_at": "2026-12-03T14:00:00+00:00",
        "finished_at": None,
        "limit": None,
        "simulator": True,
        "passed": verdict == "passed",
        "exit_code": 0,
        "interrupted": False,
        "target": {
            "url": "http://127.0.0.1:1",
            "profile": "sim",
            "slot": None,
            "release": None,
            "image": "deploytool/sim:1",
            "image_labels": {},
            "model": {"identity": "hub:org/m@abc"},
        },
        "server": {"server_info": info},
        "suites": [
            {
                "name": "performance",
                "verdict": "failed" if gates else "passed",
                "gates": gates,
                "figures": perf,
                "reason": "",
                "limited": False,
                "duration_s": 1.0,
                "method": "",
                "transcripts": [],
            },
            {
                "name": "gsm8k",
                "verdict": "passed",
                "gates": [{"name": "acc", "passed": True}],
                "figures": {
                    "modes": {
                        "deploytool thinking-off": {
                            "gate_metric": "flexible",
                            "flexible_accuracy": gsm8k.count("1") / len(gsm8k),
                            "per_question": gsm8k,
                        }
                    }
                },
            },
            {
                "name": "needle",
                "verdict": "passed",
                "gates": [],
                "figures": {
                    "by_length": [
                        {"length": 8192, "accuracy": needle[0]},
                        {"length": 20000, "accuracy": needle[1]},
                    ]
                },
            },
            {
                "name": "tools",
                "verdict": "passed",
                "gates": [],
                "figures": {"passed": tools[0], "runs": tools[1]},
            },
            {
                "name": "vision",
                "verdict": "passed",
                "gates": [],
                "figures": {"correct": vision[0], "cases": vision[1]},
            },
            {"name": "stress", "verdict": "passed", "gates": [], "figures": {"errors": list(stress_errors)}},
        ],
    }
    for suite in doc["suites"]:  # what the report writer reads of every suite and gate
        for key, value in (
            ("reason", ""),
            ("limited", False),
            ("duration_s", 1.0),
            ("method", ""),
            ("transcripts", []),
        ):
            suite.setdefault(key, value)
        for gate in suite["gates"]:
            for key, value in (("measured", 1), ("threshold", 1), ("comparison", ">="), ("detail", "")):
                gate.setdefault(key, value)
    return doc
