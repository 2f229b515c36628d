"""What a scrape costs the server it reads: the reference runtime's own CPU per /metrics answer.

    .venv/bin/python benchmarks/scrape_cost.py [SCRAPES]

Starts the reference runtime in its own process with metrics on, serves some requests so the
histograms hold counts, then reads /metrics SCRAPES times in a row and divides the server
process's CPU time (user + system, /proc/PID/stat) by SCRAPES. The monitor scrapes every 5 s
by default and `top` every 2 s, so the load they add is this figure x 0.2/s or x 0.5/s. It is
the reference runtime's figure: SGLang renders its /metrics with prometheus_client in its
tokenizer process, not measured here. A figure, not a test.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(scrapes: int) -> None:
    from sim_process import SimProcess

    with (
        SimProcess(
            decode_tps=2000, enable_metrics=True, default_chat_template_kwargs='{"enable_thinking": false}'
        ) as sim,
        httpx.Client(base_url=sim.url, timeout=30) as client,
    ):
        for i in range(20):
            client.post(
                "/v1/chat/completions",
                json={
                    "model": "sim-model",
                    "max_tokens": 20,
                    "messages": [{"role": "user", "content": f"hello {i}"}],
                },
            )
        size = len(client.get("/metrics").content)
        before = cpu_seconds(sim.proc.pid)
        for _ in range(scrapes):
            client.get("/metrics").raise_for_status()
        spent = cpu_seconds(sim.proc.pid) - before
    per = spent / scrapes
    print(
        f"{scrapes} scrapes of a {size}-byte /metrics: server CPU {per * 1000:.2f} ms per scrape; "
        f"{per * 0.2 * 100:.3f}% of one core at the monitor's 5 s, {per * 0.5 * 100:.3f}% at top's 2 s"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
