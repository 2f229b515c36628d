"""A candidate as a local process from the current Python environment (`tune --local`): a
bare-metal host without Docker, a batch node, the GPU check harness. The profile's launch
command with its flags, the interpreter swapped for this one, on loopback and a free port, its
output kept in a log file. The process runs in its own session so that stopping it stops
everything it started (SGLang's scheduler and detokenizer are children); whatever happens —
a failed start, an exception, Ctrl-C — `stop()` runs and waits for the port to be free."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
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


def parse_port_range(text: str) -> tuple[int, int]:
    """--port-range 30100-30199 -> (30100, 30199)."""
    from ..errors import FieldError

    low, sep, high = text.partition("-")
    try:
        first, last = int(low), int(high if sep else low)
    except ValueError:
        first, last = 0, -1
    if not 1024 <= first <= last <= 65535:
        raise FieldError(
            "port_range",
            "expected FIRST-LAST, two ports from 1024 to 65535, FIRST <= LAST",
            value=repr(text),
            hint="e.g. --port-range 30100-30199 (a firewall's open range, or one no other service uses)",
        )
    return first, last


def port_in_range(first: int, last: int, host: str = "127.0.0.1") -> int:
    from ..errors import FieldError

    for port in range(first, last + 1):
        if port_is_free(port, host):
            return port
    raise FieldError(
        "port_range",
        f"every port is taken on {host}",
        value=f"{first}-{last}",
        hint="free one, or give a wider range",
    )


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

    def __init__(
        self, profile: Profile, log_path: Path, host: str = "127.0.0.1", ports: tuple[int, int] | None = None
    ) -> None:
        self.profile, self.log_path, self.host, self.ports = profile, log_path, host, ports
        self.port = 0
        self._key_dir: tempfile.TemporaryDirectory[str] | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self.port = port_in_range(*self.ports, self.host) if self.ports else free_port(self.host)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        env = {**os.environ, **self.profile.server.env}
        argv = local_argv(self.profile, self.port, self.host) + self._key_config()
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    def _key_config(self) -> list[str]:
        """A keyed profile's server gets its key as a container's does: `--config FILE` holding
        `api-key` (SGLang merges the file into its flags), the file private to this user in a
        folder of its own, removed at stop; never on the command line, never in the report."""
        key = self.profile.server.api_key
        if key is None:
            return []
        from ..release.secrets import ReleaseSecret

        value = key.resolve(what=f"server.api_key of profile {self.profile.name}")
        self._key_dir = tempfile.TemporaryDirectory(prefix="deploytool-tune-")
        path = Path(self._key_dir.name) / "sglang-config.yaml"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(
                ReleaseSecret(
                    "sglang_config", key, str(path), "the server's API key", "sglang-config"
                ).content(value)
            )
        return ["--config", str(path)]

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
        # probes close together at first, then every 0.25 s: a quick server (the reference
        # runtime is ready in well under a second) is seen ready as it is, not up to a full
        # interval later, once per candidate start; a slow one is probed no more often than before
        pause = 0.05
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                return f"the server exited with status {code} before it was ready: {self.log_tail()}"
            # one probe, bounded from connect to last byte and never past the health budget
            left = max(0.5, min(5.0, deadline - time.monotonic()))
            answer = health_check(self.url, path, timeout=left)
            if answer.status == 200:
                return None
            last = (
                f"GET {path} answered {answer.status}"
                if answer.status is not None
                else (answer.error or "no answer")
            )
            time.sleep(pause)
            pause = min(0.25, pause * 1.5)
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
        if self._key_dir is not None:
            self._key_dir.cleanup()
            self._key_dir = None
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
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
