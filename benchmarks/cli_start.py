"""How much CPU `deploytool` takes to start, median of N runs (prints the figures).

    .venv/bin/python benchmarks/cli_start.py [N]

Measures `deploytool --help` and `deploytool status` with nothing running (a fresh, empty
state directory): CPU = user + system time of the child process (os.wait4), which a busy
machine inflates far less than wall time. A figure, not a test: compare it with the same
command before a change that adds an import at module level to the CLI.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

# CPU seconds each command should stay at or under: `--help` is typer building every command's
# parameters and printing; `status` adds typer's parameter coercion (it imports pydantic even for
# the absent --help flag) and one look at the engine.
GOALS_S = {"--help": 0.25, "status": 0.35}


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one run of argv."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.read().decode(errors='replace')[-2000:]}")
    proc.stderr.close()
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "DEPLOYTOOL_HOME": home}
        for args in (["--help"], ["status"]):
            argv = [sys.executable, "-m", "deploytool", *args]
            measure(argv, env)  # once to warm the file cache and write the bytecode
            cpu, wall = zip(*(measure(argv, env) for _ in range(runs)))
            median = statistics.median(cpu)
            print(f"deploytool {' '.join(args)}: CPU median {median:.3f} s (min {min(cpu):.3f}), "
                  f"wall median {statistics.median(wall):.3f} s over {runs} runs; "
                  f"goal <= {GOALS_S[args[0]]} s CPU: {'met' if median <= GOALS_S[args[0]] else 'NOT met'}")


if __name__ == "__main__":
    main()
