"""The sim in its own process, for tests that time things (a sim in a thread of the test process
shares the GIL with the bench client, and a stall on either side shows up in the figures).

It starts with the sim's own defaults, which are SGLang's: no /metrics, no cached_tokens in
usage, thinking on. A test that needs the counters or the cache report asks for them
(enable_metrics=True, enable_cache_report=True)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

from conftest import free_port


class SimProcess:
    def __init__(self, **flags):
        # a port given: a later release of the same slot, which keeps its port; else a free one
        port = flags.pop("port", None) or free_port()
        self.port = port
        argv = [
            sys.executable,
            "-m",
            "deploytool.sim",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--startup-seconds",
            "0",
            "--no-log-requests",
        ]
        for name, value in flags.items():
            flag = name.replace("_", "-")
            if isinstance(value, bool):  # the sim's on/off options: --enable-metrics / --no-enable-metrics
                argv.append(f"--{flag}" if value else f"--no-{flag}")
            elif isinstance(value, (list, tuple)):  # a repeatable option: --fault A --fault B
                for item in value:
                    argv += [f"--{flag}", str(item)]
            else:
                argv += [f"--{flag}", str(value)]
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy()
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the sim did not become ready at {self.url}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
