"""`python -m deploytool ...` as a process of its own, without paying the interpreter's start and
the CLI's imports again for every command the tests run.

A suite run starts several hundred `deploytool` commands; each spent about 0.6 to 0.8 s of CPU
importing typer, rich, the command modules and the docker SDK before it did anything, which on
a two-core machine is minutes of the run. Here one server process per pytest process imports
them once and forks a child per command. The child is a real process, as before: its own pid,
the environment, working directory, argv and `__main__` that `python -m deploytool` gives (it
runs deploytool's `__main__` through runpy as `-m` does), its own stdout and stderr pipes, an
exit code or the signal that killed it. What it does not redo is what a fresh interpreter does
before `deploytool/__main__.py` runs, so what was read of the environment then must be what the
command would read: a server is kept for each set of the variables an interpreter reads as it
starts (PYTHON*, the locale, the terminal and colour variables), the server notes every variable
its imports read, and a command whose environment differs in one of those gets a fresh
interpreter, as before.

Only `run_cli` comes here; commands a test interrupts (start_cli) are started as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

# Read when an interpreter, typer or rich starts, not when a command runs: a command whose
# environment differs from the server's in one of these is started the old way.
_READ_AT_START = re.compile(
    r"^(PYTHON.*|LC_.*|LANG|LANGUAGE|COLUMNS|LINES|TERM|COLORTERM|NO_COLOR|FORCE_COLOR|"
    r"TTY_.*|JUPYTER_.*|_?TYPER_.*|CLICOLOR.*|RICH_.*)$"
)

# What the server imports before it forks: the CLI and what its commands import on first use.
_PRELOAD = (
    "deploytool.cli",
    "docker",
    "requests",
    "httpx",
    "yaml",
    "jinja2",
    "deploytool.host.engine",
    "deploytool.profiles",
    "deploytool.image.build",
    "deploytool.deploy.render",
    "deploytool.deploy.commands",
    "deploytool.deploy.status",
    # tune's search and report, with bench's (pandas, numpy): about a second a `tune` command
    "deploytool.tune.run",
    # the pictures' (the product imports pyplot when the first is drawn, and picks the Agg
    # backend then): about 0.2 s of a `tune` that writes its report, and of every report,
    # compare and qualify that draws
    "matplotlib",
    "matplotlib.pyplot",
    # what commands then imported on first use in most of a run's several hundred: the cards'
    # reader, the HTTP client's transport, the profile schema's validator, qualify's runner
    "pynvml",
    "httpcore",
    "jsonschema",
    "filelock",
    "deploytool.qualify.runner",
)

_SERVER = r'''
import gc, importlib, json, os, runpy, select, signal, socket, sys, threading, traceback
path, preload = sys.argv[1], json.loads(sys.argv[2])

class Watched(os._Environ):
    """os.environ, noting each variable read while the imports below run."""
    reads = set()

    def __getitem__(self, key):
        Watched.reads.add(key)
        return super().__getitem__(key)

    def __iter__(self):
        Watched.reads.add("*")
        return super().__iter__()

environ = os.environ
os.environ = Watched(environ._data, environ.encodekey, environ.decodekey, environ.encodevalue, environ.decodevalue)
for name in preload:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
os.environ = environ
with open(path + ".reads", "w") as f:
    json.dump(sorted(Watched.reads), f)
assert threading.active_count() == 1, "a thread in the fork server"
listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
listener.bind(path)
listener.listen(64)
wake_r, wake_w = os.pipe()
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
gc.freeze()  # the children share these pages instead of each copying them at its first collection
running = {}

def child(conn, request, out, err):
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in (listener.fileno(), wake_r, wake_w, conn.fileno()):
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in {null, out, err} - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-m", *request["args"]]
    code = 0
    try:
        runpy.run_module("deploytool", run_name="__main__", alter_sys=True)
    except SystemExit as exc:  # as the interpreter turns it into a status
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:  # the interpreter's own shutdown: its threads, atexit, the streams
        threading._shutdown()
        import atexit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        traceback.print_exc()
        code = code or 1
    os._exit(code & 0xFF)

while True:
    ready, _, _ = select.select([listener, wake_r, 0], [], [])
    if 0 in ready and not os.read(0, 1):  # the pytest process is gone
        break
    if wake_r in ready:
        os.read(wake_r, 4096)
    if listener in ready:
        conn, _ = listener.accept()
        try:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 22, 2)
            request = json.loads(data)
            pid = os.fork()
        except Exception:
            traceback.print_exc()
            conn.close()
            continue
        if pid == 0:
            child(conn, request, *fds)
        for fd in fds:
            os.close(fd)
        conn.send(json.dumps({"pid": pid}).encode())
        running[pid] = conn
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        conn = running.pop(pid, None)
        if conn is not None:
            try:
                conn.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
            except OSError:
                pass
            conn.close()
'''


class _Server:
    def __init__(self, env: dict[str, str], cwd: Path):
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="deploytool-cli-")
        self.path = os.path.join(self.folder, "socket")
        self.env, self.reads = env, {"*"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, self.path, json.dumps(_PRELOAD)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            cwd=cwd,
        )

    def ready(self, timeout: float = 60) -> bool:
        import time

        deadline = time.monotonic() + timeout
        while not os.path.exists(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        with open(self.path + ".reads") as f:
            self.reads = set(json.load(f))
        return True

    def takes(self, env: dict[str, str]) -> bool:
        """Whether `env` agrees with the server's on every variable its imports read."""
        if "*" in self.reads:
            return False
        return all(env.get(name) == self.env.get(name) for name in self.reads)

    def close(self) -> None:
        import shutil

        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


# one server for each set of start-up variables a command is run with (the docs' commands set a
# terminal width and no colour; everything else runs with the suite's own)
_servers: dict[tuple[tuple[str, str], ...], _Server] = {}
_servers_lock = threading.Lock()


def _server_for(env: dict[str, str], cwd: Path) -> _Server | None:
    key = tuple(sorted((name, value) for name, value in env.items() if _READ_AT_START.match(name)))
    with _servers_lock:
        server = _servers.get(key)
        if server is None:
            import atexit

            server = _servers[key] = _Server(env, cwd)
            atexit.register(server.close)
            if not server.ready():
                server.close()
        return server if server.proc.poll() is None and server.takes(env) else None


def run(
    args: list[str], env: dict[str, str], cwd: Path, timeout: float | None
) -> subprocess.CompletedProcess[str]:
    """As subprocess.run([sys.executable, "-m", "deploytool", *args], capture_output=True,
    text=True, timeout=timeout, env=env, cwd=cwd), forked from the server where it can be."""
    argv = [sys.executable, "-m", "deploytool", *args]
    server = None if os.environ.get("DEPLOYTOOL_TEST_NO_FORKSERVER") == "1" else _server_for(env, cwd)
    if server is None:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        conn.connect(server.path)
        socket.send_fds(
            conn, [json.dumps({"args": list(args), "env": env, "cwd": str(cwd)}).encode()], [out_w, err_w]
        )
    except OSError:
        conn.close()
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    os.close(out_w)
    os.close(err_w)
    with conn:
        pid = json.loads(conn.recv(1 << 16))["pid"]
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        readers = [
            threading.Thread(target=_drain, args=(fd, chunks[fd]), daemon=True) for fd in (out_r, err_r)
        ]
        for reader in readers:
            reader.start()
        conn.settimeout(timeout)
        try:
            answer = conn.recv(1 << 16)
        except TimeoutError:
            _kill(pid, conn)  # as subprocess.run: killed, waited for, then the timeout raised
            for reader in readers:
                reader.join(5)
            raise subprocess.TimeoutExpired(
                argv, timeout, b"".join(chunks[out_r]), b"".join(chunks[err_r])
            ) from None
        except BaseException:  # the test's own timeout, a Ctrl-C: subprocess.run kills its child too
            _kill(pid, conn)
            raise
        for reader in readers:  # to the end of both streams, as subprocess.run reads them
            reader.join()
    if not answer:
        raise RuntimeError(f"the CLI fork server ended while `deploytool {' '.join(args)}` ran")
    return subprocess.CompletedProcess(
        argv, json.loads(answer)["returncode"], _text(b"".join(chunks[out_r])), _text(b"".join(chunks[err_r]))
    )


def _kill(pid: int, conn: socket.socket) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    conn.settimeout(30)
    with contextlib.suppress(OSError):
        conn.recv(1 << 16)  # the server has reaped it


def _drain(fd: int, into: list[bytes]) -> None:
    try:
        while chunk := os.read(fd, 1 << 16):
            into.append(chunk)
    finally:
        os.close(fd)


def _text(data: bytes) -> str:
    """As subprocess.run(text=True) decodes: the locale's encoding, universal newlines."""
    import locale

    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")
