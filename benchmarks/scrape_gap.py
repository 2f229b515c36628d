"""How long no serving release of a slot is scraped up across `up`'s hand-over, from the
monitor's own Prometheus (its `up` series), on the real engine with the reference runtime.

    .venv/bin/python benchmarks/scrape_gap.py [HANDOVERS] [SCRAPE_INTERVAL_S]

A state folder and an instance of its own (removed after), `monitor up` with the given scrape
interval (1 s unless told), release 1 on the CPU slot, then HANDOVERS (3 unless told) `up`s that
alternate two profiles, each with two clients streaming chats at the slot's URL throughout.
For each hand-over: the longest stretch between two successful scrapes of any release of the
slot (so at least one interval even with nothing missed), and the same less one interval (the
time nothing serving was seen up). On one slot `up` stops the old release before it starts the
new one (the card is one), so the gap holds the drain, the stop, the new server's start and
Prometheus's pick-up of the rewritten targets file. A figure, not a test.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def container_time(release: str, what: str) -> float:
    """When the engine says the release's container started or stopped (unix seconds)."""
    from datetime import datetime

    from deploytool.host import labels
    from deploytool.host.engine import Engine

    (container,) = Engine().client.containers.list(
        all=True,
        filters={
            "label": [
                f"{labels.INSTANCE}={labels.instance()}",
                f"{labels.SLOT}=cpu",
                f"{labels.RELEASE}={release}",
            ]
        },
    )
    stamp = container.attrs["State"][what]  # RFC 3339 with nanoseconds
    return datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00").timestamp()


def main(handovers: int, interval: int) -> None:
    import httpx
    from lifecycle_helpers import PROFILES
    from monitor_helpers import Load, serving_gap

    work = Path(tempfile.mkdtemp(prefix="scrape-gap-"))
    shared_cache = Path(os.environ.get("DEPLOYTOOL_TEST_CACHE", "/tmp/deploytool-test-cache"))
    (work / "home").mkdir()
    (work / "home" / "cache").symlink_to(shared_cache)
    profiles = work / "profiles"
    profiles.mkdir()
    for name in ("t-good", "t-good2"):
        (profiles / f"{name}.yaml").write_text(PROFILES[name])
    env = {
        **os.environ,
        "DEPLOYTOOL_HOME": str(work / "home"),
        "DEPLOYTOOL_INSTANCE": f"gap-{secrets.token_hex(3)}",
    }
    os.environ.update(env)  # this process's Engine and labels read the same instance

    def cli(*args: str) -> dict:
        proc = subprocess.run(
            [sys.executable, "-m", "deploytool", *args, "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=600,
        )
        if proc.returncode != 0:
            raise SystemExit(f"deploytool {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout)

    from conftest import free_port

    port, app_port = free_port(), free_port()
    try:
        cli("monitor", "up", "--port", str(port), "--scrape-interval", str(interval), "--retention", "1d")
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)
        up = [
            "up",
            "--cpu",
            "--skip-qualify",
            "--profiles-dir",
            str(profiles),
            "--port",
            str(app_port),
            "--profile",
        ]
        url = cli(*up, "t-good")["url"]
        time.sleep(3 * interval + 3)
        figures = []
        for i in range(handovers):
            since = time.time()
            with Load(url, clients=2):
                cli(*up, "t-good2" if i % 2 == 0 else "t-good")
                time.sleep(3 * interval + 3)  # the new release scraped a few times, within the window
            gap = serving_gap(api, "cpu", since, time.time())
            figures.append(gap)
            old, new = str(i + 1), str(i + 2)
            stopped, started = container_time(old, "FinishedAt"), container_time(new, "StartedAt")
            print(
                f"hand-over {i + 1}: longest between successful scrapes {gap['longest_s']:.1f} s "
                f"(nothing serving seen up {gap['longest_s'] - interval:.1f} s), releases {gap['releases']}; "
                f"release {old}'s last up scrape to its container stopped {stopped - gap['up_spans'][old][1]:.1f} s, "
                f"to release {new}'s container started {started - stopped:.1f} s, "
                f"to its first up scrape {gap['up_spans'][new][0] - started:.1f} s"
            )
        longest = sorted(f["longest_s"] for f in figures)
        print(
            f"scrape interval {interval} s, {handovers} hand-overs: median {longest[len(longest) // 2]:.1f} s, "
            f"max {longest[-1]:.1f} s between successful scrapes of the slot"
        )
    finally:
        subprocess.run(
            [sys.executable, "-m", "deploytool", "monitor", "down", "--json"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            timeout=300,
        )
        from lifecycle_helpers import remove_instance

        from deploytool.host.engine import Engine

        remove_instance(Engine())
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, int(sys.argv[2]) if len(sys.argv) > 2 else 1)
