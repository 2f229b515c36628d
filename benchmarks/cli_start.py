"""How long `deploytool --help` takes to start, median of N runs (prints the figure).

    .venv/bin/python benchmarks/cli_start.py [N]

A figure, not a test: run it on a quiet machine and compare with the same command before a
change that adds an import at module level to the CLI.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
seconds = []
for _ in range(runs):
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "deploytool", "--help"], capture_output=True, check=True)
    seconds.append(time.perf_counter() - started)
print(f"deploytool --help: median {statistics.median(seconds):.3f} s, min {min(seconds):.3f} s over {runs} runs")
