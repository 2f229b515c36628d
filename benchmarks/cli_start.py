"""How much CPU `deploytool` takes to start, median of N runs (prints the figures).

    .venv/bin/python benchmarks/cli_start.py [N]

Measures `deploytool --help` and `deploytool status` with nothing running (a fresh, empty
state directory and an instance name of its own, so a release serving on this engine, the
demo's, is not what status lists): CPU = user + system time of the child process (os.wait4),
which a busy machine inflates far less than wall time; the load average is printed beside it.

Twice: with every module's bytecode (what an installed deploytool runs), and with deploytool's
own modules compiled from source at each start (an editable install where
PYTHONDONTWRITEBYTECODE is set, as on the development machine: the bytecode is never written).
The bytecode lives under a private PYTHONPYCACHEPREFIX, so the checkout is left as it was. A
figure, not a test: compare it with the same command before a change that adds an import at
module level to the CLI.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import deploytool

# CPU seconds each command should stay at or under: `--help` is typer building every command's
# parameters and printing; `status` adds parsing its one flag and one look at the engine (a GET
# on its socket, host/engine_api.py).
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
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as home:
        prefix = Path(home) / "bytecode"
        env = {
            **os.environ,
            "DEPLOYTOOL_HOME": home,
            "DEPLOYTOOL_INSTANCE": f"cli-start-{os.getpid()}",
            "PYTHONPYCACHEPREFIX": str(prefix),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        writes = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        ours = prefix / Path(deploytool.__file__).resolve().parent.relative_to("/")
        for condition in ("bytecode", "compiled at each start"):
            for args in (["--help"], ["status"]):
                argv = [sys.executable, "-m", "deploytool", *args]
                measure(argv, writes)  # once to warm the file cache and write every module's bytecode
                if condition != "bytecode":
                    shutil.rmtree(ours, ignore_errors=True)
                cpu, wall = zip(*(measure(argv, env) for _ in range(runs)), strict=False)
                median = statistics.median(cpu)
                print(
                    f"deploytool {' '.join(args)} ({condition}): CPU median {median:.3f} s (min {min(cpu):.3f}), "
                    f"wall median {statistics.median(wall):.3f} s over {runs} runs; "
                    f"goal <= {GOALS_S[args[0]]} s CPU: {'met' if median <= GOALS_S[args[0]] else 'NOT met'}"
                )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()
