"""Start and stop `sglang.launch_server` on the GPU host, and watch what it answers while it loads.

Stdlib only: this runs beside the server under the host's Python, with the overlay on PYTHONPATH.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

HOST, PORT = "127.0.0.1", 30000
PIDS = Path(os.environ.get("GPU_CHECK_WORK", "/tmp/gpu-check")) / "server.pids"


def request(
    method: str,
    path: str,
    body: object = None,
    headers: dict | None = None,
    timeout: float = 30.0,
    raw: bytes | None = None,
) -> tuple[int | None, dict, bytes, str | None]:
    """(status, headers, body bytes, error text): one HTTP request on a fresh connection; a refused
    or reset connection is an answer too (status None, error set)."""
    conn = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        hdrs = dict(headers or {})
        if data is not None:
            hdrs.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read(), None
    except (OSError, http.client.HTTPException) as exc:
        return None, {}, b"", f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


class Server:
    """One launch_server process in its own process group (so stopping it takes its scheduler
    and detokenizer with it), logging to a file."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str]):
        self.argv, self.log, self.env = argv, log, env
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def start(self) -> None:
        self.started_at = time.monotonic()
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        # its own session outlives this process if the harness dies: device.sh ends these groups first
        with open(PIDS, "a") as f:
            f.write(f"{self.proc.pid}\n")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # the scheduler children may outlive the launcher: end the whole group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode

    def wait_ready(self, timeout: float) -> tuple[bool, float, str]:
        """Until GET /health answers 200 (SGLang: after its own warm-up request), the process exits,
        or the timeout passes."""
        start = time.monotonic()
        last = "not tried"
        while time.monotonic() - start < timeout:
            if not self.alive():
                return (
                    False,
                    time.monotonic() - self.started_at,
                    f"the server exited with {self.proc.returncode}",
                )
            status, _, _, error = request("GET", "/health", timeout=5)
            if status == 200:
                return True, time.monotonic() - self.started_at, "200"
            last = error or f"HTTP {status}"
            time.sleep(0.5)
        return False, time.monotonic() - self.started_at, f"not ready after {timeout:.0f} s (last: {last})"


class LoadWatch(threading.Thread):
    """Polls the routes a client meets while the server loads and keeps every change of answer
    (status, or the kind of connection error, and the body's head) with its time since launch.
    At the first 200 from /health it also takes /metrics and /server_info once: the counters
    before any client request."""

    PATHS = ("/health", "/health_generate", "/v1/models", "/server_info")

    def __init__(self, t0: float, headers: dict, interval: float = 0.25):
        super().__init__(daemon=True)
        self.t0, self.headers, self.interval = t0, headers, interval
        self.events: list[dict] = []
        self.first_ready: dict | None = None
        self._halt = threading.Event()
        self._last: dict[str, tuple] = {}

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        while not self._halt.is_set():
            for path in self.PATHS:
                status, hdrs, body, error = request("GET", path, headers=self.headers, timeout=3)
                kind = (status, error.split(":")[0] if error else None)
                if self._last.get(path) != kind:
                    self._last[path] = kind
                    self.events.append(
                        {
                            "t_s": round(time.monotonic() - self.t0, 3),
                            "path": path,
                            "status": status,
                            "error": error,
                            "content_type": hdrs.get("content-type"),
                            "body": body[:400].decode("utf-8", "replace"),
                        }
                    )
                if path == "/health" and status == 200 and self.first_ready is None:
                    m = request("GET", "/metrics", headers=self.headers, timeout=5)
                    s = request("GET", "/server_info", headers=self.headers, timeout=5)
                    self.first_ready = {
                        "t_s": round(time.monotonic() - self.t0, 3),
                        "metrics_status": m[0],
                        "metrics": m[2].decode("utf-8", "replace"),
                        "server_info_status": s[0],
                        "server_info": s[2].decode("utf-8", "replace"),
                    }
            self._halt.wait(self.interval)


def stop_all() -> None:
    """End every server this harness started (their process groups), e.g. after a step raised."""
    if not PIDS.exists():
        return
    for line in PIDS.read_text().split():
        with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
            os.killpg(int(line), signal.SIGKILL)
    PIDS.unlink()
    time.sleep(2)
