"""What one round of `deploytool top` costs: its own CPU, and what the server it reads sees.

    .venv/bin/python benchmarks/top_cost.py [ROUNDS]

Starts the reference runtime in its own process (metrics on, 4 clients keeping it busy from
another process), then runs ROUNDS rounds of top's scrape-and-figures (one server, the cards
read through the stand-in NVML of the lent H200's captured host) in this process: CPU seconds
per round (time.process_time, this process only: the server and the clients are elsewhere),
the /metrics body's size, and the rendered view's CPU. A figure, not a test.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main(rounds: int) -> None:
    os.environ["DEPLOYTOOL_NVML_STANDIN"] = str(ROOT / "tests/data/nvml-hosts/h200-lent.yaml")
    from rich.console import Console
    from sim_process import SimProcess

    from deploytool.monitor.top import make_top
    from deploytool.monitor.top_view import render

    with SimProcess(
        decode_tps=200,
        max_running_requests=4,
        enable_metrics=True,
        default_chat_template_kwargs='{"enable_thinking": false}',
    ) as sim:
        load = subprocess.Popen(
            [
                sys.executable,
                "-c",
                (
                    "import sys; sys.path.insert(0, 'tests'); import time; from monitor_helpers import Load\n"
                    f"with Load('{sim.url}', clients=4): time.sleep(3600)"
                ),
            ],
            cwd=ROOT,
        )
        try:
            time.sleep(2)
            top = make_top([sim.url])
            # open for the whole measured run, which the process ends
            console = Console(file=open(os.devnull, "w"), width=140)  # noqa: SIM115

            async def run() -> tuple[list[float], list[float]]:
                scrape_cpu, view_cpu = [], []
                for _ in range(rounds):
                    started = time.process_time()
                    result = await top.round()
                    scrape_cpu.append(time.process_time() - started)
                    started = time.process_time()
                    console.print(render(result))
                    view_cpu.append(time.process_time() - started)
                    await asyncio.sleep(0.5)
                return scrape_cpu, view_cpu

            async def measured() -> tuple[list[float], list[float]]:
                try:
                    return await run()
                finally:
                    await top.aclose()

            scrape_cpu, view_cpu = asyncio.run(measured())
            import httpx

            size = len(httpx.get(sim.url + "/metrics").content)
        finally:
            load.terminate()
            load.wait()
    print(f"rounds: {rounds}; /metrics body {size} bytes")
    print(
        f"round (scrape, parse, figures, cards): CPU median {statistics.median(scrape_cpu) * 1000:.1f} ms, "
        f"max {max(scrape_cpu) * 1000:.1f} ms"
    )
    print(
        f"view (rich render):                  CPU median {statistics.median(view_cpu) * 1000:.1f} ms, "
        f"max {max(view_cpu) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
