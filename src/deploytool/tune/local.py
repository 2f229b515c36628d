"""A candidate as a local process from the current Python environment (`tune --local`): a
bare-metal host without Docker, a batch node, the GPU check harness. The profile's launch
command with its flags, the interpreter swapped for this one, on loopback and a free port, its
output kept in a log file. The process runs in its own session so that stopping it stops
everything it started (SGLang's scheduler and detokenizer are children); whatever happens —
a failed start, an exception, Ctrl-C — `stop()` runs and waits for the port to be free."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from ..profiles import Profile, args_to_argv
from ..redaction import scrub_file
from ..server.readiness import health_check


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def local_argv(profile: Profile, port: int, host: str = "127.0.0.1") -> list[str]:
    """The launch command for this environment: `python ...` becomes this interpreter (the
    image's /opt/venv/bin/python is not here), host and port are loopback and the free port,
    the model path the host folder."""
    command = list(profile.server.command)
    if command and Path(command[0]).name.startswith("python"):
        command[0] = sys.executable
    args = {**profile.launch_args(), "host": host, "port": port}
    if profile.model.host_path and "model-path" in args:
        args["model-path"] = profile.model.host_path  # a local process reads the folder itself, unmounted
    return command + args_to_argv(args)


class LocalServer:
    """One candidate's server process. Use as a context manager, or call stop() in a finally."""

    def __init__(self, profile: Profile, log_path: Path, host: str = "127.0.0.1") -> None:
        self.profile, self.log_path, self.host = profile, log_path, host
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.port = free_port(self.host)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        env = {**os.environ, **self.profile.server.env}
        self.proc = subprocess.Popen(local_argv(self.profile, self.port, self.host), stdout=self._log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True)

    def served_profile(self) -> Profile:
        """The profile as this process serves it (loopback, the free port): what qualify's
        contract compares the server with."""
        args = {**self.profile.server.args, "host": self.host, "port": self.port}
        server = self.profile.server.model_copy(update={"args": args, "port": self.port})
        return self.profile.model_copy(update={"server": server})

    def wait_ready(self, timeout_s: float) -> str | None:
        """None once the health path answers 200; else why not (the process ended, with its
        log's last lines, or the health budget ran out)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        path = self.profile.health.path
        last = "nothing answered"
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                return f"the server exited with status {code} before it was ready: {self.log_tail()}"
            # one probe, bounded from connect to last byte and never past the health budget
            left = max(0.5, min(5.0, deadline - time.monotonic()))
            answer = health_check(self.url, path, timeout=left)
            if answer.status == 200:
                return None
            last = f"GET {path} answered {answer.status}" if answer.status is not None else (answer.error or "no answer")
            time.sleep(0.25)
        return f"not ready within its health budget ({timeout_s:g} s): {last}"

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM to the process group, SIGKILL after `grace_s`; then wait for the port."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait(timeout=10)
            # children the server left behind in its session go too
            _signal_group(proc, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None
            # the server wrote its log straight into the report: scrub what it said of its key
            scrub_file(self.log_path)
        if self.port:
            deadline = time.monotonic() + 10
            while not port_is_free(self.port, self.host) and time.monotonic() < deadline:
                time.sleep(0.1)

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
