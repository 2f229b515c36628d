"""deploytool bench against SGLang's own `sglang.bench_serving`, on one real server in one run:
the same fixed-concurrency streamed workload (prompt, output length with ignore_eos, concurrency,
request count), each client in its own process, alternating A B B A. Output tok/s and median TTFT
side by side with their ratio, and each client's CPU per 1,000 streamed tokens: the marginal
CPU (user + system, os.wait4) of a large run over a small one, so imports and start-up cancel.

    python agree.py --url URL --model NAME --tokenizer DIR [--concurrency 8 --requests 64 ...] --out F
    python agree.py --deploytool-client ...     (internal: one deploytool run, JSON on stdout)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def deploytool_client(a: argparse.Namespace) -> None:
    from deploytool.bench import build_method
    from deploytool.bench.runner import BenchRunner, Spec
    from deploytool.checks.targets import Target

    method = build_method(
        quick=True,
        repeats=1,
        warmup_requests=1,
        warmup_output_tokens=16,
        request_timeout_s=300,
        run_timeout_s=600,
    )
    # the key as deploytool finds it (DEPLOYTOOL_API_KEY), never on a command line
    runner = BenchRunner(
        Target(url=a.url, profile=None, api_key=os.environ.get("DEPLOYTOOL_API_KEY")), method, progress=False
    )

    async def go():
        async with runner.session():
            return await runner.measure(
                "load",
                "load",
                a.concurrency,
                lambda: [
                    runner.job(Spec("load", "load", a.concurrency, i, a.prompt_tokens, a.output_tokens))
                    for i in range(a.requests)
                ],
            )

    group = asyncio.run(go())
    print(
        json.dumps(
            {
                "completed": group.completed,
                "output_tps": group.aggregate_output_tps,
                "ttft_median_ms": group.ttft_median_s * 1000,
                "output_tokens": group.completed * a.output_tokens,
            }
        )
    )


def measured(argv: list[str], env: dict) -> tuple[str, float, float]:
    """Run one client to completion; CPU from wait4 (the process and what it waited for)."""
    t = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, text=True)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        text, errors = out.read(), err.read()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv[:4])} exited {proc.returncode}: {errors[-2000:]}")
    return text, time.perf_counter() - t, ru.ru_utime + ru.ru_stime


def one(client: str, a: argparse.Namespace, requests: int, env: dict) -> dict:
    if client == "deploytool":
        argv = [
            sys.executable,
            __file__,
            "--deploytool-client",
            "--url",
            a.url,
            "--concurrency",
            str(a.concurrency),
            "--requests",
            str(requests),
            "--prompt-tokens",
            str(a.prompt_tokens),
            "--output-tokens",
            str(a.output_tokens),
        ]
        text, wall, cpu = measured(argv, env)
        data = json.loads(text.strip().splitlines()[-1])
        return {"client": client, "requests": requests, **data, "wall_s": wall, "cpu_s": cpu}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        argv = [
            sys.executable,
            "-m",
            "sglang.bench_serving",
            "--backend",
            "sglang-oai-chat",
            "--base-url",
            a.url,
            "--model",
            a.model,
            "--tokenizer",
            a.tokenizer,
            "--dataset-name",
            "random-ids",
            "--random-input-len",
            str(a.prompt_tokens),
            "--random-output-len",
            str(a.output_tokens),
            "--random-range-ratio",
            "1",
            "--num-prompts",
            str(requests),
            "--max-concurrency",
            str(a.concurrency),
            "--request-rate",
            "inf",
            "--output-file",
            str(out),
        ]
        _, wall, cpu = measured(argv, env)
        data = json.loads(out.read_text().strip().splitlines()[-1])
    return {
        "client": client,
        "requests": requests,
        "completed": data["completed"],
        "output_tps": data["output_throughput"],
        "ttft_median_ms": data["median_ttft_ms"],
        "output_tokens": data.get("total_output_tokens"),
        "wall_s": wall,
        "cpu_s": cpu,
        "command": "python -m " + " ".join(argv[2:]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deploytool-client", action="store_true")
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="default")
    ap.add_argument("--tokenizer")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--small", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=256)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.deploytool_client:
        return deploytool_client(a)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    runs = []
    for client in ("deploytool", "sglang.bench_serving", "sglang.bench_serving", "deploytool"):  # A B B A
        runs.append(one(client, a, a.requests, env))
        print(json.dumps(runs[-1]), flush=True)
    small = {c: one(c, a, a.small, env) for c in ("deploytool", "sglang.bench_serving")}
    summary = {}
    for c in ("deploytool", "sglang.bench_serving"):
        large = [r for r in runs if r["client"] == c]
        tokens = statistics.median(r["output_tokens"] or r["requests"] * a.output_tokens for r in large) - (
            small[c]["output_tokens"] or a.small * a.output_tokens
        )
        cpu = statistics.median(r["cpu_s"] for r in large) - small[c]["cpu_s"]
        summary[c] = {
            "output_tps": statistics.median(r["output_tps"] for r in large),
            "ttft_median_ms": statistics.median(r["ttft_median_ms"] for r in large),
            # the marginal CPU is only a figure where the large run's extra tokens
            # cost more than the start-up noise between two processes
            "cpu_ms_per_1k_tokens": round(cpu / tokens * 1e6, 2) if tokens > 0 and cpu > 0 else None,
        }
    d, s = summary["deploytool"], summary["sglang.bench_serving"]
    result = {
        "workload": {
            "concurrency": a.concurrency,
            "requests": a.requests,
            "small_requests": a.small,
            "prompt_tokens": a.prompt_tokens,
            "output_tokens": a.output_tokens,
        },
        "runs": runs,
        "small_runs": small,
        "summary": summary,
        "ratio_sglang_over_deploytool": {
            "output_tps": s["output_tps"] / d["output_tps"],
            "ttft_median": s["ttft_median_ms"] / d["ttft_median_ms"],
        },
    }
    print(json.dumps(result["ratio_sglang_over_deploytool"]))
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
