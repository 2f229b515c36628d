"""Do deploytool's figures agree with the tools people already use? Prints figures; not a test.

On one server (the sim in its own process), in one run, one fixed-concurrency streamed workload
measured by three clients one after the other:

- deploytool's bench (its load phase: `concurrency` requests in flight, median TTFT, aggregate
  output tok/s = output tokens / (last end - first start));
- SGLang's own `python -m sglang.bench_serving --backend sglang-oai-chat --dataset-name random-ids`
  (benchmarks/.venv-sglang, made by benchmarks/setup_sglang_client.sh);
- guidellm (`guidellm run`, a venv of its own outside git: --guidellm PATH/bin/guidellm).

and prints each one's output throughput and median TTFT with its ratio to deploytool's.

The server: every request decodes at --decode-tps (no aggregate cap, max running = concurrency,
so no request queues), prefill is near instant, and --schedule-latency-s puts a fixed wait before
every first token: each client builds its prompts its own way (token ids, synthetic text, random
words) and counts them with its own tokenizer, so a TTFT made of prefill would differ by the
prompts, not by the clients; a fixed latency makes TTFT a property of the server alone.

    python benchmarks/agreement.py --guidellm /path/to/venv/bin/guidellm [--concurrency 8 --requests 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from client_overhead import SGLANG_PY, run_measured, sglang_tokenizer, start_sim  # noqa: E402

MODEL = "agree"


def deploytool_run(url: str, a: argparse.Namespace) -> dict:
    from deploytool.bench import build_method
    from deploytool.bench.runner import BenchRunner
    from deploytool.bench.spec import Spec
    from deploytool.checks.targets import Target

    method = build_method(
        quick=True,
        repeats=1,
        warmup_requests=1,
        warmup_output_tokens=16,
        request_timeout_s=300,
        run_timeout_s=1200,
    )
    runner = BenchRunner(Target(url=url, profile=None), method, progress=False)

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

    started = time.perf_counter()
    group = asyncio.run(go())
    return {
        "client": "deploytool",
        "completed": group.completed,
        "output_tps": group.aggregate_output_tps,
        "ttft_median_ms": group.ttft_median_s * 1000,
        "wall_s": time.perf_counter() - started,
    }


def sglang_run(url: str, a: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        argv = [
            str(SGLANG_PY),
            "-m",
            "sglang.bench_serving",
            "--backend",
            "sglang-oai-chat",
            "--base-url",
            url,
            "--model",
            MODEL,
            "--tokenizer",
            str(sglang_tokenizer()),
            "--dataset-name",
            "random-ids",
            "--random-input-len",
            str(a.prompt_tokens),
            "--random-output-len",
            str(a.output_tokens),
            "--random-range-ratio",
            "1",
            "--num-prompts",
            str(a.requests),
            "--max-concurrency",
            str(a.concurrency),
            "--request-rate",
            "inf",
            "--output-file",
            str(out),
        ]
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        _, wall, _ = run_measured(argv, env)
        data = json.loads(out.read_text().strip().splitlines()[-1])
    return {
        "client": "sglang.bench_serving",
        "completed": data["completed"],
        "output_tps": data["output_throughput"],
        "ttft_median_ms": data["median_ttft_ms"],
        "wall_s": wall,
        "command": " ".join(argv[1:]),
    }


def guidellm_run(url: str, a: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "guidellm.json"
        argv = [
            a.guidellm,
            "run",
            "--backend",
            f"kind=openai_http,target={url},model={MODEL},request_format=/v1/chat/completions",
            "--profile",
            f"kind=concurrent,streams={a.concurrency}",
            "--constraint",
            f"kind=max_requests,count={a.requests}",
            "--tokenizer",
            f"kind=huggingface_auto,model={sglang_tokenizer()}",
            "--data",
            f"kind=synthetic_text,prompt_tokens={a.prompt_tokens},output_tokens={a.output_tokens}",
            "--output",
            f"kind=json,path={out}",
            "--disable-console-interactive",
        ]
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        _, wall, _ = run_measured(argv, env)
        report = json.loads(out.read_text())
    bench = report["benchmarks"][0]
    metrics = bench["metrics"]
    return {
        "client": "guidellm",
        "completed": metrics["request_totals"]["successful"],
        "output_tps": metrics["output_tokens_per_second"]["successful"]["mean"],
        "ttft_median_ms": metrics["time_to_first_token_ms"]["successful"]["median"],
        "wall_s": wall,
        "command": " ".join(argv[1:]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--output-tokens", type=int, default=256)
    p.add_argument("--decode-tps", type=float, default=100.0)
    p.add_argument("--schedule-latency-s", type=float, default=0.2)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--guidellm", help="path to the guidellm executable (its own venv)")
    a = p.parse_args()
    clients = [deploytool_run]
    if SGLANG_PY.exists():
        clients.append(sglang_run)
    if a.guidellm:
        clients.append(guidellm_run)
    server, url = start_sim(
        a.decode_tps, max_running=a.concurrency, schedule_latency_s=a.schedule_latency_s, model=MODEL
    )
    rows = []
    try:
        for rep in range(a.repeat):
            for fn in clients:
                row = fn(url, a)
                row["repeat"] = rep + 1
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=10)
    load = os.getloadavg()
    print(
        f"workload: {a.requests} requests, concurrency {a.concurrency}, ~{a.prompt_tokens} prompt tokens, "
        f"{a.output_tokens} output tokens (ignore_eos), streamed; server: the sim in its own process, "
        f"{a.decode_tps:g} tok/s per request, schedule latency {a.schedule_latency_s:g} s; "
        f"{os.cpu_count()} CPUs, load average {load[0]:.1f} at the end"
    )
    print(
        f"{'client':<22}{'run':>4}{'completed':>10}{'output tok/s':>14}{'ratio':>8}{'TTFT p50 ms':>13}{'ratio':>8}"
    )
    for rep in range(1, a.repeat + 1):
        ours = next(r for r in rows if r["repeat"] == rep and r["client"] == "deploytool")
        for r in (r for r in rows if r["repeat"] == rep):
            print(
                f"{r['client']:<22}{rep:>4}{r['completed']:>10}{r['output_tps']:>14,.1f}"
                f"{r['output_tps'] / ours['output_tps']:>8.3f}{r['ttft_median_ms']:>13.1f}"
                f"{r['ttft_median_ms'] / ours['ttft_median_ms']:>8.3f}"
            )
    for r in rows:
        if r.get("command"):
            print(f"{r['client']} command: {r['command']}")
            break
    names = {r["client"] for r in rows}
    for name in sorted(names - {"deploytool"}):
        tps = [
            r["output_tps"]
            / next(o for o in rows if o["repeat"] == r["repeat"] and o["client"] == "deploytool")[
                "output_tps"
            ]
            for r in rows
            if r["client"] == name
        ]
        ttft = [
            r["ttft_median_ms"]
            / next(o for o in rows if o["repeat"] == r["repeat"] and o["client"] == "deploytool")[
                "ttft_median_ms"
            ]
            for r in rows
            if r["client"] == name
        ]
        print(
            f"{name} / deploytool: output tok/s {statistics.median(tps):.3f}, median TTFT {statistics.median(ttft):.3f} "
            f"(median over {len(tps)} runs)"
        )


if __name__ == "__main__":
    main()
