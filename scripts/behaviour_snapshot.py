"""The --json of `up --dry-run`, `tune --dry-run`, and `qualify` and `bench` against the reference
runtime, with the values that differ from run to run (times, speeds, dates, temporary paths)
masked: run it with the deploytool of two trees and diff the folders, to show a change of design
changed no behaviour.

    python scripts/behaviour_snapshot.py --deploytool OLD/.venv/bin/deploytool --out /tmp/snap-old
    python scripts/behaviour_snapshot.py --deploytool .venv/bin/deploytool --out /tmp/snap-new
    diff -r /tmp/snap-old /tmp/snap-new

Each run has its own state folder, instance and port, so it touches no release of the host's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

# keys whose values are measurements or moments: their presence and type are compared, not value
_MEASURED = re.compile(
    r"(time|seconds|_s$|_ms$|tps|rate|latency|ttft|tpot|itl|throughput|elapsed|duration|date|"
    r"started|finished|created|_at$|speed|tokens_per|cpu|wall|mean|median|p50|p90|p99|std|"
    r"goodput|estimate|seed|port|measured|overlapping)",
    re.IGNORECASE,
)
# what each run draws afresh on purpose (the needle's haystack and its number, tool-call ids), so
# that no server can answer from a cache: compared by presence and type
_DRAWN = re.compile(
    r"^(content|id|prompt_tokens|prompt_tokens_max|sentences|needle|answer|expected|got|total_tokens|\d+)$"
)
# the examples a run failed on (which the reference runtime's random text decides), in the order
# they finished: their number and content differ from run to run of the same tree
_EXAMPLES = {"transcripts", "examples", "failures"}
_DATE = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?|\d{8}T\d{6}\d*Z?")


def _mask(value: Any, key: str, roots: list[str]) -> Any:
    if isinstance(value, dict):
        return {k: "<examples>" if k in _EXAMPLES else _mask(v, str(k), roots) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, key, roots) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if _DRAWN.match(key) and isinstance(value, str | int | float):
        return f"<{type(value).__name__}>"
    if isinstance(value, int | float) and (_MEASURED.search(key) or isinstance(value, float)):
        return f"<{type(value).__name__}>"
    if isinstance(value, str) and "special magic number" in value:
        return "<the needle's drawn answer>"
    if isinstance(value, str):
        for root in roots:
            value = value.replace(root, "<tmp>")
        value = _DATE.sub("<date>", value)
        # a run's random ids (request prefixes, report names)
        value = re.sub(r"\b[0-9a-f]{8,}\b", "<id>", value)
        value = re.sub(r"\bmeasured \d+\.\d+", "measured <float>", value)
        return re.sub(r"\b\d+(\.\d+)? ?(s|ms|tok/s|tokens/s)\b", "<measured>", value)
    return value


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(url: str, deadline_s: float = 30.0) -> None:
    import httpx

    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the reference runtime at {url} did not become healthy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deploytool", required=True, type=Path, help="the deploytool executable of a tree")
    parser.add_argument("--out", required=True, type=Path, help="folder for the masked snapshots")
    args = parser.parse_args()
    exe = args.deploytool.resolve()
    python = exe.parent / "python"
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="snapshot-") as tmp:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("DEPLOYTOOL_")},
            "DEPLOYTOOL_HOME": str(Path(tmp, "home")),
            "DEPLOYTOOL_INSTANCE": "snap-" + secrets.token_hex(3),
            "NO_COLOR": "1",
        }
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        sim = subprocess.Popen(
            [str(python), "-m", "deploytool.sim", "--port", str(port), "--startup-seconds", "0"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait(url)
            runs = {
                "up-dry-run": ["up", "--cpu", "--profile", "sim", "--dry-run", "--json"],
                "tune-dry-run": ["tune", "--profile", "sim", "--dry-run", "--json"],
                "qualify": [
                    "qualify",
                    "--url",
                    url,
                    "--profile",
                    "sim",
                    "--limit",
                    "2",
                    "--no-progress",
                    "--report",
                    str(Path(tmp, "qualify")),
                    "--json",
                ],
                "bench": [
                    "bench",
                    "--url",
                    url,
                    "--profile",
                    "sim",
                    "--quick",
                    "--repeats",
                    "1",
                    "--report",
                    str(Path(tmp, "bench")),
                    "--json",
                ],
            }
            for name, argv in runs.items():
                done = subprocess.run([str(exe), *argv], env=env, capture_output=True, text=True, check=False)
                try:
                    body: Any = json.loads(done.stdout)
                except json.JSONDecodeError:
                    body = {"stdout": done.stdout[-2000:]}
                roots = [tmp, env["DEPLOYTOOL_INSTANCE"], str(port)]
                snapshot = {"exit": done.returncode, "json": _mask(body, "", roots)}
                (args.out / f"{name}.json").write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
                print(f"{name}: exit {done.returncode}")
        finally:
            sim.terminate()
            sim.wait(10)


if __name__ == "__main__":
    main()
