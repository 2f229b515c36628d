"""The memory plan's upper edge on a real card (docs/measured/h200-upper-edge.md): for each launch,
the highest mem-fraction-static at which SGLang starts and serves one request at the full chunk.
Stdlib only, beside the overlay (PYTHONPATH=SITE), like refusals.py.

    python edge.py --models DIR --out DIR [--only ID,...] [--deadline EPOCH] [--probe FRACTION]
                   [--known ID=EDGE,...]

--probe: where the probe starts (0.90 by default; an MTP launch whose draft pool cannot fit
there is probed lower). --known: launches whose prediction an earlier call made (its edge.json):
no probe, only the confirmation starts, so a second call spends its minutes confirming.

Not a blind bisection: each launch is started once at a probe fraction, SGLang's own lines are
read (the weights' load, the pools, the graph capture) and NVML's free memory after one request
of the full chunk; since raising the fraction by d grows the pool (and an MTP draft's pool beside
it in proportion) by d x pre_model_load_memory and nothing else, that predicts the edge; then the
launch is started just below and just above the prediction to confirm it. OUT/edge.json keeps
every start (argv, fraction, served or how it died, SGLang's memory lines, NVML's free memory).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
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
    "--context-length",
    "32768",
    # token ids in, token ids out: the model folders carry no tokenizer (the upload stays small)
    "--skip-tokenizer-init",
]
NEXTN = [
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--mamba-radix-cache-strategy",
    "no_buffer",
]
# id, model, flags (graph max bs, chunk and running limit each launch's own)
LAUNCHES = [
    (
        "dense-bs8-c2k",
        "qwen3-tiny",
        ["--cuda-graph-max-bs", "8", "--chunked-prefill-size", "2048", "--max-running-requests", "8"],
    ),
    (
        "dense-bs512-c16k",
        "qwen3-tiny",
        ["--cuda-graph-max-bs", "512", "--chunked-prefill-size", "16384", "--max-running-requests", "512"],
    ),
    (
        "hybrid-mtp-bs16-c8k",
        "qwen36-tiny",
        [
            *NEXTN,
            "--cuda-graph-max-bs",
            "16",
            "--chunked-prefill-size",
            "8192",
            "--max-running-requests",
            "16",
        ],
    ),
    (
        "hybrid-bs128-c4k",
        "qwen36-tiny",
        [
            "--cuda-graph-max-bs",
            "128",
            "--chunked-prefill-size",
            "4096",
            "--max-running-requests",
            "128",
            "--mamba-radix-cache-strategy",
            "no_buffer",
        ],
    ),
    (
        "dense-bs64-c8k",
        "qwen3-tiny",
        ["--cuda-graph-max-bs", "64", "--chunked-prefill-size", "8192", "--max-running-requests", "64"],
    ),
    (
        "hybrid-mtp-bs64-c16k",
        "qwen36-tiny",
        [
            *NEXTN,
            "--cuda-graph-max-bs",
            "64",
            "--chunked-prefill-size",
            "16384",
            "--max-running-requests",
            "64",
        ],
    ),
]
PROBE = 0.90
MEMORY = re.compile(
    r"avail mem|Memory pool end|KV Cache is allocated|Mamba Cache|max_total_num_tokens|"
    r"CUDA graph|out of memory|OutOfMemory|Not enough memory|Traceback|Error",
    re.I,
)
PORT = 30000


def nvml_free_mib() -> float | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.free,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.split(",")
        return float(out[0])
    except Exception:
        return None


def post(path: str, body: dict, timeout: float) -> tuple[int | None, str]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()[:300].decode("utf-8", "replace")
    except Exception as exc:  # an answer too: the server died or refused
        return None, f"{type(exc).__name__}: {exc}"[:300]


def healthy(timeout: float = 3) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=timeout) as r:
            return r.status == 200
    except Exception:
        return False


def start(row, fraction: float, models: Path, logs: Path, limit: float) -> dict:
    """One start at `fraction`, one request of the full chunk; the server is stopped after."""
    ident, model, flags = row
    chunk = int(flags[flags.index("--chunked-prefill-size") + 1])
    argv = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(models / model),
        *COMMON,
        "--port",
        str(PORT),
        *flags,
        "--mem-fraction-static",
        f"{fraction:.4f}",
    ]
    log = logs / f"{ident}-{fraction:.4f}.log"
    t0 = time.monotonic()
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    rec = {"id": ident, "fraction": fraction, "argv": argv[3:], "chunk": chunk}
    try:
        while time.monotonic() - t0 < limit:
            if proc.poll() is not None:
                rec["outcome"] = f"died while starting (exit {proc.returncode})"
                break
            if healthy():
                break
            time.sleep(0.5)
        else:
            rec["outcome"] = f"not ready after {limit:.0f} s"
        if "outcome" not in rec:
            rec["ready_s"] = round(time.monotonic() - t0, 1)
            rec["free_mib_ready"] = nvml_free_mib()
            # token ids, not text: the prompt is exactly the chunk, whatever the tokenizer does
            ids = [(7 * i + 11) % 30000 + 100 for i in range(chunk)]
            status, body = post(
                "/generate",
                {"input_ids": ids, "sampling_params": {"max_new_tokens": 8, "temperature": 0}},
                120,
            )
            time.sleep(1.0)
            rec["free_mib_after_chunk"] = nvml_free_mib()
            alive = proc.poll() is None and healthy(10)
            rec["request"] = {"status": status, "body": body}
            rec["outcome"] = (
                "served"
                if status == 200 and alive
                else (f"died serving the chunk (HTTP {status}, alive {alive})")
            )
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        time.sleep(2)
    rec["seconds"] = round(time.monotonic() - t0, 1)
    lines = log.read_text(errors="replace").splitlines()
    rec["memory_lines"] = [x[:400] for x in lines if MEMORY.search(x)][:80]
    rec["tail"] = [x[:400] for x in lines[-15:]] if rec["outcome"] != "served" else []
    print(
        f"[{time.strftime('%H:%M:%S')}] {ident} at {fraction:.4f}: {rec['outcome']} ({rec['seconds']} s, "
        f"free after the chunk {rec.get('free_mib_after_chunk')} MiB)",
        flush=True,
    )
    return rec


def gb(lines: list[str], pattern: str) -> list[float]:
    return [float(m.group(1)) for x in lines if (m := re.search(pattern, x))]


def predict(rec: dict) -> float | None:
    """The edge from one start: pre_model_load_memory is "Load weight begin" + the 102 MiB the
    scheduler allocates before it (docs/memory.md); the pool grows by d x pre per d of fraction,
    and an MTP draft's pool beside it in proportion (the two "Memory pool end" lines)."""
    lines = rec["memory_lines"]
    begin = gb(lines, r"Load weight begin\. avail mem=([\d.]+) GB")
    ends = gb(lines, r"Memory pool end\. avail mem=([\d.]+) GB")
    loaded = gb(lines, r"Load weight end\..*avail mem=([\d.]+) GB")
    if not begin or not ends or rec.get("free_mib_after_chunk") is None:
        return None
    pre = begin[0] + 102 / 1024
    growth = 1.0
    if len(ends) >= 2 and loaded:
        target_pool = loaded[-1] - ends[0]
        draft_pool = ends[0] - ends[1]
        growth += draft_pool / target_pool if target_pool > 0 else 0.0
    # the workspace SGLang allocates after the pool grows with the pool's tokens (about 48 B a
    # token in the recorded starts: docs/memory.md), so in proportion to the cell
    kv = [
        (int(m.group(1)), float(m.group(2)) + float(m.group(3)))
        for x in lines
        if (
            m := re.search(
                r"KV Cache is allocated.*#tokens: (\d+), K size: ([\d.]+) GB, V size: ([\d.]+) GB", x
            )
        )
    ]
    if kv and kv[0][0]:
        growth *= 1 + 48 / (kv[0][1] * 2**30 / kv[0][0])
    free_gib = rec["free_mib_after_chunk"] / 1024
    rec["predicted_from"] = {
        "pre_gib": round(pre, 3),
        "growth": round(growth, 4),
        "free_gib": round(free_gib, 3),
    }
    return rec["fraction"] + free_gib / (pre * growth)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--deadline", type=float, default=time.time() + 520)
    ap.add_argument("--limit", type=float, default=150)
    ap.add_argument("--step", type=float, default=0.005)
    ap.add_argument("--probe", type=float, default=PROBE)
    ap.add_argument("--known", default="", help="ID=EDGE,...: predictions from an earlier call")
    a = ap.parse_args()
    known = {k: float(v) for k, v in (item.split("=", 1) for item in a.known.split(",") if item)}
    logs = a.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rows = [r for r in LAUNCHES if not a.only or r[0] in a.only.split(",")]
    starts: list[dict] = []
    verdicts: dict[str, dict] = {}

    def save() -> None:
        (a.out / "edge.json").write_text(json.dumps({"starts": starts, "edges": verdicts}, indent=1))

    def time_left() -> float:
        return a.deadline - time.time()

    # one probe start of each launch first: every launch gets its prediction before any confirmation
    for n, row in enumerate(rows):
        if row[0] in known:
            verdicts[row[0]] = {"probe": None, "predicted": known[row[0]], "served": [], "failed": []}
            continue
        if time_left() < 60:
            break
        # the first start compiles the kernels (about two minutes cold)
        rec = start(row, a.probe, a.models, logs, min(a.limit + (120 if n == 0 else 0), time_left() - 20))
        starts.append(rec)
        p = predict(rec) if rec["outcome"] == "served" else None
        verdicts[row[0]] = {
            "probe": a.probe,
            "predicted": None if p is None else round(p, 4),
            "served": [a.probe] if rec["outcome"] == "served" else [],
            "failed": [],
        }
        save()
    # then confirm each prediction: just below it must serve, just above must not
    for row in rows:
        v = verdicts.get(row[0])
        if not v or v["predicted"] is None:
            continue
        below = min(0.999, round((v["predicted"] - a.step) / a.step) * a.step)
        for f in (below, below + 2 * a.step):
            if time_left() < 60 or f >= 1.0:
                break
            rec = start(row, f, a.models, logs, min(a.limit, time_left() - 20))
            starts.append(rec)
            (v["served"] if rec["outcome"] == "served" else v["failed"]).append(round(f, 4))
            save()
    save()


if __name__ == "__main__":
    main()
