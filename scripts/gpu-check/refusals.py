"""Launches SGLang refuses or changes at start-up, each started on the GPU host and watched only
until SGLang has said what it does with it (docs/measured/h200-refusals.md). Stdlib only, beside
the overlay (PYTHONPATH=SITE), like server.py.

    python refusals.py --models DIR --out DIR [--only ID,...] [--limit SECONDS]

Every launch gets `--max-total-tokens` where its row is not about memory, so the launches can run
side by side on one card without one's pool taking another's budget; each is stopped as soon as
its `until` line appears (most before any kernel is compiled). Writes OUT/refusals.json (per
launch: argv, env, exit code, SGLang's lines that say what it did, the log's tail) and
OUT/logs/ID.log.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

COMMON = [
    "--load-format",
    "dummy",
    "--attention-backend",
    "triton",
    "--sampling-backend",
    "pytorch",
    "--disable-prefill-cuda-graph",
    "--host",
    "127.0.0.1",
]
SMALL_POOL = ["--max-total-tokens", "200000", "--mem-fraction-static", "0.3"]
SCHED = r"max_total_num_tokens=\d+.*max_running_requests=\d+"
NEXTN = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]

# id, model, flags, env, the line that ends the watch (besides the process ending)
LAUNCHES = [
    ("context-over-derived", "qwen3-tiny", ["--context-length", "65536", *SMALL_POOL], {}, SCHED),
    (
        "context-over-allowed-by-env",
        "qwen3-tiny",
        ["--context-length", "65536", "--disable-cuda-graph", *SMALL_POOL],
        {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
        SCHED,
    ),
    (
        "running-capped-by-state-cache",
        "qwen36-tiny",
        ["--max-running-requests", "24", "--max-mamba-cache-size", "30", "--disable-cuda-graph", *SMALL_POOL],
        {},
        SCHED,
    ),
    (
        "draft-tokens-rewritten",
        "qwen36-tiny",
        [*NEXTN, "--speculative-num-draft-tokens", "6", "--max-running-requests", "8", *SMALL_POOL],
        {},
        r"speculative_num_draft_tokens is adjusted",
    ),
    (
        "spec-default-running-limit",
        "qwen36-tiny",
        [*NEXTN, "--speculative-num-draft-tokens", "4", "--disable-cuda-graph", *SMALL_POOL],
        {},
        SCHED,
    ),
    (
        "spec-disables-mixed-chunk",
        "qwen36-tiny",
        [
            *NEXTN,
            "--speculative-num-draft-tokens",
            "4",
            "--max-running-requests",
            "8",
            "--enable-mixed-chunk",
            *SMALL_POOL,
        ],
        {},
        r"Mixed chunked prefill is disabled",
    ),
    ("kv-nvfp4-needs-blackwell", "qwen3-tiny", ["--kv-cache-dtype", "nvfp4", *SMALL_POOL], {}, SCHED),
    ("kv-mxfp8-needs-blackwell", "qwen3-tiny", ["--kv-cache-dtype", "mxfp8", *SMALL_POOL], {}, SCHED),
    (
        "kv-fp4-backend-flashinfer",
        "qwen3-tiny",
        ["--kv-cache-dtype", "fp4_mx_block16", *SMALL_POOL, "--attention-backend", "flashinfer"],
        {},
        SCHED,
    ),
    # the budget is pre_model_load x fraction - weights: 0.001 x 139 GB is less than the 0.26 GB of weights,
    # 0.01 is not (a control: SGLang starts, and deploytool must not refuse it); each runs alone
    (
        "fraction-leaves-no-pool",
        "qwen3-tiny",
        ["--mem-fraction-static", "0.001", "--disable-cuda-graph"],
        {},
        SCHED,
    ),
    (
        "fraction-small-but-enough",
        "qwen3-tiny",
        ["--mem-fraction-static", "0.01", "--disable-cuda-graph"],
        {},
        SCHED,
    ),
    (
        "graph-bs-capped-by-running",
        "qwen3-tiny",
        ["--max-running-requests", "4", "--cuda-graph-max-bs", "16", *SMALL_POOL],
        {},
        r"CUDA graph begin.*bs=\[",
    ),
    (
        "running-capped-by-pool",
        "qwen3-tiny",
        [
            "--max-total-tokens",
            "8192",
            "--context-length",
            "8192",
            "--max-running-requests",
            "8192",
            "--mem-fraction-static",
            "0.3",
            "--disable-cuda-graph",
        ],
        {},
        SCHED,
    ),
]

SAYS = re.compile(
    r"error|Error|warning|WARNING|Warning|adjust|capped|reset to|disabled|requires|expects|"
    r"Not enough|context_len|max_running_requests|bs=\[|Traceback",
    re.I,
)


def launch(row, models: Path, logs: Path, port: int):
    ident, model, flags, env_extra, until = row
    argv = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(models / model),
        *COMMON,
        "--port",
        str(port),
        *flags,
    ]
    # the last of a repeated flag wins in argparse: a row's own --attention-backend replaces COMMON's
    env = {**os.environ, **env_extra}
    log = logs / f"{ident}.log"
    f = open(log, "wb")  # noqa: SIM115  (the server's output for its whole life; closed when it is stopped)
    proc = subprocess.Popen(
        argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
    )
    return {
        "id": ident,
        "model": model,
        "argv": argv[2:],
        "env": env_extra,
        "until": until,
        "proc": proc,
        "log": log,
        "file": f,
        "started": time.monotonic(),
    }


def stop(run) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(run["proc"].pid, sig)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            run["proc"].wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--limit", type=float, default=300)
    ap.add_argument("--stagger", type=float, default=2.0)
    a = ap.parse_args()
    logs = a.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rows = [r for r in LAUNCHES if not a.only or r[0] in a.only.split(",")]
    runs = []
    for i, row in enumerate(rows):
        runs.append(launch(row, a.models, logs, 31000 + 10 * i))
        time.sleep(a.stagger)
    deadline = time.monotonic() + a.limit
    pending = list(runs)
    while pending and time.monotonic() < deadline:
        time.sleep(1)
        for run in list(pending):
            text = run["log"].read_text(errors="replace")
            rc = run["proc"].poll()
            if rc is not None:
                run["how"] = f"exited {rc}"
            elif re.search(run["until"], text):
                run["how"] = "stopped once SGLang had said it"
                time.sleep(2)  # the lines right after the one watched for
                stop(run)
            else:
                continue
            run["seconds"] = round(time.monotonic() - run["started"], 1)
            pending.remove(run)
            print(
                f"[{time.strftime('%H:%M:%S')}] {run['id']}: {run['how']} after {run['seconds']} s",
                flush=True,
            )
    for run in pending:
        run["how"] = f"still starting after {a.limit:.0f} s: stopped"
        stop(run)
    out = []
    for run in runs:
        run["file"].close()
        lines = run["log"].read_text(errors="replace").splitlines()
        out.append(
            {
                "id": run["id"],
                "model": run["model"],
                "argv": run["argv"],
                "env": run["env"],
                "how": run["how"],
                "rc": run["proc"].returncode,
                "seconds": run.get("seconds"),
                "said": [x[:600] for x in lines if SAYS.search(x)][:60],
                "tail": [x[:600] for x in lines[-40:]],
            }
        )
    (a.out / "refusals.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
