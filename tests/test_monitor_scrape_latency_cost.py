"""benchmarks/scrape_latency_cost.py runs end to end with tiny settings and prints its table: the
three settings with the requests they served, the scraper's own requests (none in the no-scraper
phases, some at 0.5 s) and a verdict per p99 ratio. It asserts no timing: the figures are the
benchmark's own (docs/measured/monitor-scrape-latency.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_scrape_latency_benchmark_prints_its_table():
    # One repeat of A B C C B A, 1 s phases, 2 clients: a few seconds besides the processes' start.
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/scrape_latency_cost.py"), "1", "1", "2"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    rows = {}
    for line in done.stdout.splitlines():
        m = re.match(r"(no scraper|every 5 s|every 0\.5 s)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), int(m.group(4)))
    assert set(rows) == {"no scraper", "every 5 s", "every 0.5 s"}, done.stdout
    for name, (rps, _, n) in rows.items():
        assert rps > 0 and n > 0, (name, done.stdout)
    assert rows["no scraper"][1] == 0, done.stdout  # the no-scraper phases' process only sleeps
    assert rows["every 0.5 s"][1] > 0, done.stdout
    verdicts = [line for line in done.stdout.splitlines() if "p99 x" in line and "spread" in line]
    assert len(verdicts) == 4, done.stdout  # TTFT and latency, for each of the two scrapers
