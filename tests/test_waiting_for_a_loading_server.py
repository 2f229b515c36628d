"""`bench` and `qualify` wait for a server that is still loading: SGLang refuses connections
until its weights are loaded, then answers /health with an empty 503 until warm-up is done."""

from __future__ import annotations

import socket

from typer.testing import CliRunner

from deploytool.cli import app
from deploytool.errors import EXIT_COULD_NOT_RUN
from deploytool.server.client import run_sync
from deploytool.server.readiness import wait_until_ready
from deploytool.sim import SimSettings, serve_in_thread


def test_wait_until_ready_rides_out_refusals_and_503_with_progress_lines() -> None:
    lines: list[str] = []
    settings = SimSettings(load_seconds=1.5, startup_seconds=1.0, log_requests=False)
    with serve_in_thread(settings) as handle:
        ready = run_sync(
            wait_until_ready(
                handle.url, timeout_s=30, poll_s=0.1, progress=lines.append, progress_every_s=0.5
            )
        )
    assert ready.ready and ready.status == 200 and ready.waited_s >= 2.0
    assert any("refused" in line for line in lines) and any("HTTP 503" in line for line in lines)
    assert all("of 30 s" in line for line in lines)


def test_bench_gives_up_could_not_run_when_the_wait_expires() -> None:
    with socket.socket() as bound:  # bound, never listening
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        result = CliRunner().invoke(app, ["bench", "--url", url, "--quick", "--ready-timeout", "1"])
    assert result.exit_code == EXIT_COULD_NOT_RUN, result.output  # 6: could not run
    assert "did not become ready within 1 s" in result.output


def test_the_waiting_line_names_the_option_that_ends_the_wait() -> None:
    """A wrong port must not cost the whole wait without an obvious way out."""
    lines: list[str] = []
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        ready = run_sync(
            wait_until_ready(
                url,
                timeout_s=1.2,
                poll_s=0.1,
                progress=lines.append,
                progress_every_s=0.3,
                timeout_name="--ready-timeout",
            )
        )
    assert not ready.ready and lines
    assert all(
        "refused" in line and "of 1.2 s; --ready-timeout to wait less or more" in line for line in lines
    )


def test_qualify_takes_the_same_option_and_names_it_when_it_gives_up(tmp_path) -> None:
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        result = CliRunner().invoke(
            app,
            [
                "qualify",
                "--url",
                url,
                "--ready-timeout",
                "1",
                "--no-progress",
                "--report",
                str(tmp_path / "r"),
            ],
        )
    assert result.exit_code == EXIT_COULD_NOT_RUN, result.output
    assert "after 1" in result.output and "--ready-timeout" in result.output


def test_one_option_one_name_one_meaning() -> None:
    """qualify and bench document --ready-timeout in the same words."""

    def help_of(command: str) -> str:
        option = next(p for p in typer_command(command).params if p.name == "ready_timeout")
        return f"{option.opts} {option.help}"

    assert help_of("qualify") == help_of("bench") and "--ready-timeout" in help_of("qualify")


def typer_command(name: str):
    import typer.main

    return typer.main.get_command(app).commands[name]


def test_bench_when_ready_sends_nothing_and_writes_no_report_when_the_wait_expires(tmp_path) -> None:
    """The library, without the CLI: the wait, its verdict and its exit code live in bench/."""
    from deploytool.bench import build_method
    from deploytool.bench.outcome import bench_when_ready
    from deploytool.checks.targets import Target

    lines: list[str] = []
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        outcome = bench_when_ready(
            Target(url=url, profile=None),
            method=build_method(quick=True),
            report_dir=tmp_path / "r",
            ready_timeout_s=0.6,
            timeout_name="--ready-timeout",
            on_wait=lines.append,
            progress=False,
        )
    assert outcome.run is None and outcome.exit_code == EXIT_COULD_NOT_RUN
    assert "did not become ready within 0.6 s (--ready-timeout)" in outcome.why
    assert not (tmp_path / "r").exists()
