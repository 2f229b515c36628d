"""How often a short container's output is lost, read two ways, on a loaded engine (prints counts).

    .venv/bin/python benchmarks/throwaway_output.py [RUNS] [--busy N] [--threads T]

A container that prints one line and exits at once, RUNS times, T at a time, beside N busy loops
that load the CPU, read:
  - from its log once it has exited (what Engine.run_throwaway did before), and
  - from the files its script wrote, read back from its filesystem (Engine.run_throwaway now).
The two alternate, twice each, so that both see the same load. A figure, not a test: a lost
answer is rare (about 1 in 200 on the 2-core development machine), too rare for a test to catch.
Needs the engine and deploytool/base:bookworm (`make test` makes it).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import subprocess
import time

from deploytool.host.engine import Engine

IMAGE = "deploytool/base:bookworm"
EXPECTED = json.dumps({"answer": "x" * 200})


def by_log(engine: Engine) -> bool:
    container = engine.client.containers.create(
        IMAGE, entrypoint=["/bin/sh", "-c"], command=[f"echo '{EXPECTED}'"], network_mode="none"
    )
    try:
        container.start()
        container.wait()
        return container.logs(stdout=True, stderr=False).decode().strip() == EXPECTED
    finally:
        container.remove(force=True)


def by_file(engine: Engine) -> bool:
    return engine.run_throwaway(IMAGE, f"echo '{EXPECTED}'").strip() == EXPECTED


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", type=int, default=200)
    parser.add_argument("--busy", type=int, default=4, help="busy loops beside the containers")
    parser.add_argument("--threads", type=int, default=8, help="containers at a time")
    args = parser.parse_args()
    engine = Engine()
    busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(args.busy)]
    try:
        for name, read in (("log after exit", by_log), ("files (run_throwaway)", by_file)) * 2:
            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
                lost = sum(not ok for ok in pool.map(lambda _, read=read: read(engine), range(args.runs)))
            print(
                f"{name:<22} {args.runs} runs  {lost} empty or wrong  {time.perf_counter() - started:.1f} s",
                flush=True,
            )
    finally:
        for proc in busy:
            proc.kill()


if __name__ == "__main__":
    main()
