"""What comes from outside reaches the terminal as text, never as commands, and no file or line
holds a secret deploytool knows: a hostile reference runtime on loopback (sim/hostile.py's
terminal_escapes, rich_markup, lone_surrogates and infinity modes) against `qualify` and `bench`,
a raw server whose chunk-size line never ends against bench's streaming path, a forged journal
entry, a container log with escapes, a printed key and a 32 MiB line, YAML alias bombs (of
values, of text) and a megabyte value in a profiles folder, a tune candidate that prints its key."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import run_cli, start_cli
from deploy_facts import release as release_row
from lifecycle_helpers import up
from sim_process import SimProcess

from deploytool.sim.hostile import ESCAPES, MARKUP, SURROGATES

pytestmark = pytest.mark.timeout(300)

# What a terminal acts on: OSC (clipboard, title, links), cursor moves and erases, the one-byte
# CSI, BEL, backspace, carriage return, a bidi override.
ACTED_ON = ("\x1b]", "\x1b[1A", "\x1b[2K", "\x9b", "\x07", "\x08", "\r", "\u202e")


def _qualify(mode: str, tmp_path: Path, *extra: str):
    with SimProcess(fault=[mode], decode_tps=2000) as server:
        return run_cli(
            "qualify",
            "--url",
            server.url,
            "--suite",
            "preflight",
            "--suite",
            "contract",
            "--no-progress",
            "--ready-timeout",
            "5",
            "--report",
            str(tmp_path / "report"),
            *extra,
            env={"FORCE_COLOR": "1"},
            timeout=180,
        )  # colours on, as on a terminal


def test_qualify_shows_a_servers_escape_sequences_and_obeys_none(tmp_path: Path) -> None:
    out = _qualify("terminal_escapes", tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    for sequence in ACTED_ON:
        assert sequence not in out.stdout + out.stderr, (sequence, out.stdout[-2000:])
    # shown, escaped, where the server put them; the FAILED verdict is still the last word
    assert "\\x1b]52;c;" in out.stdout and "\\x1b[1A\\x1b[2K" in out.stdout and "\\u202e" in out.stdout
    assert out.stdout.rstrip().splitlines()[-1].startswith("qualify FAILED")
    assert "\x1b[" in out.stdout  # deploytool's own colours still reach the terminal


def test_qualify_reads_a_servers_markup_as_text(tmp_path: Path) -> None:
    out = _qualify("rich_markup", tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and "MarkupError" not in out.stderr, out.stderr[-2000:]
    assert "[link=https://example.invalid/owned]click here[/link]" in out.stdout
    assert "[/x]" in out.stdout
    assert "\x1b]8;" not in out.stdout  # no live link


def test_qualify_refuses_a_servers_infinity_as_bad_input(tmp_path: Path) -> None:
    out = _qualify("infinity", tmp_path, "--json")
    assert "Traceback" not in out.stderr and "OverflowError" not in out.stderr, out.stderr[-2000:]
    assert out.returncode == 1, out.stderr
    results = json.loads(out.stdout)
    # the answers that held it are refused whole, as any malformed body is: nothing read from them
    assert results["server"]["models"] is None and results["server"]["server_info"] is None
    preflight = next(s for s in results["suites"] if s["name"] == "preflight")
    assert preflight["verdict"] == "failed" and "context length not reported" in preflight["reason"]


# What SURROGATES would be written as through surrogateescape, and the surrogates themselves.
SURROGATE_BYTES = ("\u202e", "\x9b", "\udce2", "\udc9b")


def test_qualify_and_bench_refuse_a_servers_lone_surrogates_as_bad_input(tmp_path: Path) -> None:
    """A lone surrogate's escape in every string a server sends: refused as malformed JSON, as a
    number JSON does not have is; a verdict and its report, never an encoding traceback."""
    with SimProcess(fault=["lone_surrogates"], decode_tps=2000) as server:
        qualified = run_cli(
            "qualify",
            "--url",
            server.url,
            "--suite",
            "preflight",
            "--suite",
            "contract",
            "--no-progress",
            "--ready-timeout",
            "5",
            "--report",
            str(tmp_path / "report"),
            "--json",
            timeout=180,
        )
        benched = run_cli(
            "bench",
            "--url",
            server.url,
            "--quick",
            "--repeats",
            "1",
            "--report",
            str(tmp_path / "bench"),
            timeout=240,
        )
    for out in (qualified, benched):
        assert "Traceback" not in out.stderr and "UnicodeEncodeError" not in out.stderr, out.stderr[-2000:]
        assert not any(s in out.stdout + out.stderr for s in SURROGATE_BYTES)
    assert qualified.returncode == 1, qualified.stderr
    results = json.loads(qualified.stdout)
    assert results["server"]["models"] is None  # the answer that held one is refused whole
    assert (tmp_path / "report" / "results.json").is_file()
    assert benched.returncode == 6 and "no request completed" in benched.stderr, (
        benched.stdout + benched.stderr
    )
    errors = {r["error"] for r in json.loads((tmp_path / "bench" / "results.json").read_text())["requests"]}
    assert len(errors) == 1 and "lone surrogate" in errors.pop(), errors


def test_a_report_with_a_lone_surrogate_is_written_with_its_escape(tmp_path: Path) -> None:
    from deploytool.files import write_atomic

    written = write_atomic(tmp_path / "report.md", f"model: sim{SURROGATES}\n").read_bytes()
    assert written == b"model: sim\\udce2\\udc80\\udcae\\udcc2\\udc9b\n"  # escapes, never the raw bytes


def test_journal_prints_a_forged_line_inside_its_own_entry(deploytool_home: Path) -> None:
    from deploytool.release.state import journal

    journal("release.failed", slot="cpu", release=3, error=f"the server said: {ESCAPES}")
    journal("release.cutover", slot="cpu", release=2, url="http://127.0.0.1:30000")
    out = run_cli("journal")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2, lines  # two entries, two lines: the forged one is inside the first
    assert "\\n2026-01-01 00:00:00Z  release.cutover" in lines[0] and "forged" in lines[0]
    assert not any(s in out.stdout for s in ACTED_ON)


def test_ups_progress_and_errors_show_a_servers_text_as_text(capsys: pytest.CaptureFixture) -> None:
    """`up` says what the server and its log said (a health answer, a log tail) in its progress
    lines and its error: shown, not obeyed, not read as markup."""
    from deploytool import cli
    from deploytool.cli.console_reporter import ConsoleReporter
    from deploytool.errors import DeployError

    said = f"the server answered: {ESCAPES} {MARKUP}"
    ConsoleReporter().step(said)
    ConsoleReporter().warn(said)
    failed = DeployError(said, hint=MARKUP)
    with pytest.raises(SystemExit):  # how main says a DeploytoolError
        cli._error(failed.message, failed.hint, failed.exit_code)
    err = capsys.readouterr().err
    assert not any(s in err for s in ACTED_ON), err
    assert err.count("[/x]") == 4 and err.count("\\x1b]52;c;") == 3, err


class _Engine:
    """The engine as `logs` reads it: one release of the CPU slot, its log as given."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks, self.calls = chunks, 0

    def releases(self, slot: str):
        self.calls += 1
        if self.calls > 1:  # a followed log: the release is gone after its stream ends
            return []
        return [replace(release_row(1, "running", health="healthy"), slot=slot)]

    def logs(self, release, *, tail=None, since=None, follow=False):
        return iter(self.chunks) if follow else b"".join(self.chunks)


KEY = "sk-hostile-log-key-4242"
HUGE = 32 * 2**20


def _logs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path, *args: str) -> str:
    """`deploytool logs --cpu --release 1 ARGS` as its entry point runs it, over a log that
    prints the release's key, escape sequences and one 32 MiB line written in 64 KiB pieces."""
    from deploytool import cli, redaction
    from deploytool.deploy import slot_commands
    from deploytool.release.state import release_path

    redaction.forget_all()  # a fresh process holds nothing: `logs` must read the key itself
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    record = release_path("cpu", 1) / "release.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"release": 1, "api_key": {"file": str(key_file)}}))
    head = f"launch: python -m sglang.launch_server --api-key {KEY}\nserved {ESCAPES[:60]}\n".encode()
    chunks = [head, *([b"y" * 2**16] * (HUGE // 2**16)), b"\nafter the long line\n"]
    monkeypatch.setattr(slot_commands, "Engine", lambda: _Engine(chunks))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.main(["logs", "--cpu", "--release", "1", *args])
    assert exit_.value.code in (0, None)
    return capsys.readouterr().out


@pytest.mark.parametrize("follow", [False, True])
def test_logs_shows_escapes_hides_the_key_and_cuts_a_huge_line(
    follow: bool, monkeypatch, capsys, tmp_path, deploytool_home
) -> None:
    from deploytool.deploy.log_lines import CUT_MARK, MAX_LINE_BYTES

    started = time.monotonic()
    out = _logs(monkeypatch, capsys, tmp_path, *(["--follow"] if follow else []))
    # linear in the log's bytes: seconds, where joining the pieces again at every one took minutes
    assert time.monotonic() - started < 60
    assert KEY not in out and "--api-key <redacted>" in out
    assert not any(s in out for s in ACTED_ON) and "\\x1b]52;c;" in out
    lines = out.splitlines()
    assert lines[-2] == "y" * MAX_LINE_BYTES + CUT_MARK and lines[-1] == "after the long line"


def test_logs_raw_prints_the_stream_as_written_but_never_the_key(
    monkeypatch, capsys, tmp_path, deploytool_home
) -> None:
    out = _logs(monkeypatch, capsys, tmp_path, "--raw", "--tail", "5")
    assert "\x1b]52;c;" in out and "\\x1b" not in out
    assert KEY not in out and "--api-key <redacted>" in out


def _serve_raw(conn: socket.socket, stop: threading.Event) -> None:
    """HTTP/1.1 by hand (no ASGI server writes a broken chunked body): the reads a bench makes
    first are answered as a small server would; every chat is answered 200, chunked, and then
    hex digits of a chunk size without end (bounded here: until the client hangs up, 30 s)."""
    with conn:
        conn.settimeout(10)
        pending = b""
        while not stop.is_set():
            while b"\r\n\r\n" not in pending:
                data = conn.recv(65536)
                if not data:
                    return
                pending += data
            head, _, pending = pending.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = next(
                (
                    int(v)
                    for k, _, v in (line.partition(":") for line in lines[1:])
                    if k.strip().lower() == "content-length"
                ),
                0,
            )
            while len(pending) < length:
                pending += conn.recv(65536)
            pending = pending[length:]
            if method == "POST" and path == "/v1/chat/completions":
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                deadline = time.monotonic() + 30
                with contextlib.suppress(
                    OSError
                ):  # the client hung up: what a client that refuses the line does
                    while not stop.is_set() and time.monotonic() < deadline:
                        conn.sendall(b"f" * 4096)
                return
            if path == "/v1/models":
                status, body = (
                    "200 OK",
                    json.dumps(
                        {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]}
                    ).encode(),
                )
            elif path.startswith("/health"):
                status, body = "200 OK", b""
            else:
                status, body = "404 Not Found", b'{"detail": "Not Found"}'
            conn.sendall(
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )


@contextlib.contextmanager
def endless_chunk_size_line():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.5)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            threading.Thread(target=_serve_raw, args=(conn, stop), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def test_bench_refuses_a_chunk_size_line_that_never_ends(tmp_path: Path) -> None:
    with endless_chunk_size_line() as url:
        started = time.monotonic()
        out = run_cli(
            "bench",
            "--url",
            url,
            "--quick",
            "--repeats",
            "1",
            "--report",
            str(tmp_path / "bench"),
            timeout=240,
        )
        took = time.monotonic() - started
    assert out.returncode == 6 and "no request completed" in out.stderr, out.stdout + out.stderr
    errors = {r["error"] for r in json.loads((tmp_path / "bench" / "results.json").read_text())["requests"]}
    assert errors == {"response refused: a chunk-size line larger than 4096 bytes: not read further"}, errors
    # each request refused at the line's cap, none held to its deadline: seconds, not minutes
    assert took < 60, took


def test_profiles_list_refuses_a_yaml_alias_bomb_naming_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    lines = ["name: bomb", 'a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 7)]  # 9**7 values
    (folder / "bomb.yaml").write_text("\n".join(lines) + "\n")
    out = run_cli("profiles", "list", "--profiles-dir", str(folder), timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        f"{folder / 'bomb.yaml'}: its YAML aliases (*name) expand to more than 100,000 values" in out.stderr
    )


def test_profiles_list_refuses_aliases_that_name_too_much_text(tmp_path: Path) -> None:
    """Few values, much text: one 1 MB scalar named 20 times in server.args is 20 MB once read
    (the value count stays far below its bound); refused naming the file, nothing expanded."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    names = "\n".join(f"    arg-{i}: *big" for i in range(1, 20))
    (folder / "wide.yaml").write_text(
        f'name: wide\nextends: sim\nserver:\n  args:\n    arg-0: &big "{"x" * 2**20}"\n{names}\n'
    )
    out = run_cli("profiles", "list", "--profiles-dir", str(folder), timeout=120)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert (
        f"{folder / 'wide.yaml'}: its YAML aliases (*name) expand to more than 16 MiB of text" in out.stderr
    )
    assert len(out.stderr) < 2000


def test_a_profile_error_shows_the_start_of_a_huge_value(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "big.yaml").write_text(f'name: big\nextends: sim\nserver:\n  port: "{"9" * 2**20}x"\n')
    out = run_cli("profiles", "show", "--profile", "big", "--profiles-dir", str(folder), timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "server.port" in out.stderr and f"({2**20 + 3:,} characters in all)" in out.stderr, out.stderr[
        -2000:
    ]
    assert len(out.stderr) < 2000  # the value's start, not the megabyte again


def test_a_tune_candidates_log_in_the_report_holds_no_key(tmp_path: Path, monkeypatch) -> None:
    from deploytool import redaction
    from deploytool.profiles import load_profile
    from deploytool.tune import local

    key = "sk-tune-candidate-key-777"
    redaction.hold(key)  # as tune holds the profile's key once it has read it
    program = f"import sys; print('starting with', {key!r}, 'and --api-key', {key!r}); sys.stdout.flush()"
    monkeypatch.setattr(local, "local_argv", lambda profile, port, host: [sys.executable, "-c", program])
    log = tmp_path / "report" / "logs" / "c1-start1.log"
    server = local.LocalServer(load_profile("sim"), log)
    server.start()
    server.proc.wait(timeout=30)
    server.stop()
    text = log.read_text()
    assert "starting with" in text and key not in text, text


LOUD = """\
name: t-loud
extends: t-good
server:
  api_key: {{file: {key}}}
  env: {{DEPLOYTOOL_SIM_FAULT: "print_server_args,terminal_escapes,huge_log_line"}}
"""


@pytest.mark.index  # the sim image's wheels are downloaded once (then cached)
def test_logs_of_a_release_that_prints_its_key_escapes_and_a_huge_line(
    slot_env, profiles_dir, tmp_path, docker_engine
) -> None:
    from deploytool.deploy.log_lines import CUT_MARK, MAX_LINE_BYTES

    key = "sk-container-log-key-5150"
    key_file = tmp_path / "api-key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    (profiles_dir / "t-loud.yaml").write_text(LOUD.format(key=key_file))
    started = up(slot_env, "t-loud")
    assert started.returncode == 0, started.stdout + started.stderr

    shown = slot_env("logs", "--cpu")
    assert shown.returncode == 0, shown.stderr
    assert key not in shown.stdout and "api_key='<redacted>'" in shown.stdout
    assert not any(s in shown.stdout for s in ACTED_ON) and "\\x1b]52;c;" in shown.stdout
    lines = shown.stdout.splitlines()
    cut = [i for i, line in enumerate(lines) if line.endswith(CUT_MARK)]
    assert len(cut) == 1 and lines[cut[0]].endswith("z" * (MAX_LINE_BYTES // 2) + CUT_MARK)
    assert "FAULT huge_log_line: after the long line" in lines[cut[0] + 1]

    raw = slot_env("logs", "--cpu", "--raw")
    assert "\x1b]52;c;" in raw.stdout and key not in raw.stdout and "api_key='<redacted>'" in raw.stdout

    # followed: the line arrives in the engine's pieces; it is cut as it comes, in linear time
    follow = start_cli("logs", "--cpu", "--follow")
    seen: list[str] = []
    threading.Thread(target=lambda: seen.extend(follow.stdout), daemon=True).start()  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 60  # seconds; joining the pieces again at each one took minutes
        while not any("after the long line" in line for line in seen):
            assert time.monotonic() < deadline and follow.poll() is None, [line[:200] for line in seen]
            time.sleep(0.2)
    finally:
        follow.send_signal(signal.SIGINT)
        follow.wait(30)
    assert sum(line.rstrip("\n").endswith(CUT_MARK) for line in seen) == 1
    assert not any(key in line for line in seen)
