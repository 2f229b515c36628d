"""Serving: in a thread for tests (serve_in_thread) or as the process's main loop (run)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import uvicorn

from deploytool.sim import launch_rules
from deploytool.sim.app import create_app
from deploytool.sim.faults import StreamDropped, parse_faults
from deploytool.sim.log import log
from deploytool.sim.settings import SimSettings


class _HideDroppedStreams(logging.Filter):
    """drop_stream closes connections by raising StreamDropped; that is the fault, not a bug to trace."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (exc is not None and _contains_drop(exc))


def _contains_drop(exc: BaseException) -> bool:
    if isinstance(exc, StreamDropped):
        return True
    inner = [*getattr(exc, "exceptions", ()), exc.__cause__, exc.__context__]
    return any(e is not None and e is not exc and _contains_drop(e) for e in inner)


def _install_log_filter() -> None:
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _HideDroppedStreams) for f in logger.filters):
        logger.addFilter(_HideDroppedStreams())


def _config(app: Any, settings: SimSettings) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        access_log=False,  # RequestLog writes one richer line per request
        log_level="warning",
        timeout_graceful_shutdown=2,
        # as SGLang: uvicorn's timeout_keep_alive = SGLANG_TIMEOUT_KEEP_ALIVE (5 s by default)
        timeout_keep_alive=settings.keep_alive_seconds,  # type: ignore[arg-type]  # uvicorn says int, but its loop.call_later takes fractional seconds
    )


class SimHandle:
    """A sim serving on 127.0.0.1 in a background thread. Use as a context manager or call stop()."""

    def __init__(self, settings: SimSettings, sock: socket.socket) -> None:
        self.settings = settings
        self.host, self.port = sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        self.exit_code: int | None = None  # set when a crash fault ended the server
        self._sock = sock
        self.app = create_app(settings, on_crash=self._crash)
        self._server = uvicorn.Server(_config(self.app, settings))
        self._thread = threading.Thread(target=self._run, name=f"deploytool-sim-{self.port}", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            # Simulated weight loading: the port is bound (no one else takes it) but not listening,
            # so connections are refused, as before SGLang's HTTP server starts.
            if self.settings.load_seconds:
                time.sleep(self.settings.load_seconds)
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # surfaced by start()
            self._error = exc

    def start(self, timeout: float = 15.0) -> SimHandle:
        self._thread.start()
        if self.settings.load_seconds:
            return self  # refusing connections while it "loads": the caller waits, as for SGLang
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"deploytool.sim failed to start: {self._error!r}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"deploytool.sim did not start listening within {timeout}s")
            time.sleep(0.01)
        return self

    def _crash(self, code: int) -> None:
        # in-process stand-in for os._exit: the server goes away, connections are cut, the test lives on
        self.exit_code = code
        self._server.should_exit = True
        self._server.force_exit = True

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll /health until it answers 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.url}/health did not answer 200 within {timeout}s")

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout)
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _listen(host: str, port: int) -> socket.socket:
    # IPPROTO_TCP named, as the sockets uvicorn binds itself are: asyncio turns Nagle off
    # (TCP_NODELAY) only on connections whose socket says TCP, and with Nagle on every response
    # after a connection's first held its body back until the client's delayed ACK (~40 ms)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))  # port 0: the kernel picks a free port, no race with other tests
    sock.set_inheritable(True)
    return sock


def serve_in_thread(
    settings: SimSettings | None = None, port: int = 0, host: str = "127.0.0.1", wait_ready: bool = False
) -> SimHandle:
    """Start a sim on ``host:port`` (port 0: a free one) in a daemon thread; returns once it listens.

    The simulated start-up (settings.startup_seconds) still applies: /health is 503 until it has
    passed; pass wait_ready=True to block until /health answers 200. Crash faults stop this
    server (handle.exit_code == 3) instead of ending the test process; crash_on_start raises.
    """
    settings = dataclasses.replace(settings or SimSettings(), host=host)
    if parse_faults(settings.faults).crash_on_start:
        raise RuntimeError("deploytool.sim: fault crash_on_start: the server exits with status 3 at start")
    if failure := launch_rules.start_failure(settings):
        raise RuntimeError(f"deploytool.sim cannot start: {failure}")
    _install_log_filter()
    sock = _listen(host, port)
    settings = dataclasses.replace(settings, port=sock.getsockname()[1])
    handle = SimHandle(settings, sock)
    try:
        handle.start()
    except BaseException:
        sock.close()
        raise
    if wait_ready:
        handle.wait_ready()
    return handle


def run(settings: SimSettings, app: Any = None) -> None:
    """Serve in the foreground until SIGINT/SIGTERM (the container's main process)."""
    app = app if app is not None else create_app(settings)
    _install_log_filter()
    if settings.load_seconds:
        log(f"simulated weight loading: nothing listens for {settings.load_seconds:g} s")
        time.sleep(settings.load_seconds)
    log(f"listening on http://{settings.host}:{settings.port}")
    uvicorn.Server(_config(app, settings)).run()
