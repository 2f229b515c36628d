"""`make test` says first what on this host could interfere (scripts/test-notice.sh) and goes on."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

from conftest import ROOT


def _notice(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """scripts/test-notice.sh as `make test` runs it (bash by its path: `env` may leave PATH bare)."""
    return subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "test-notice.sh"), sys.executable],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )


def _notice_with_the_port_busy(port: int) -> subprocess.CompletedProcess[str]:
    """The notice run while the port is busy: held by a socket of this test's own where it can
    bind, else by whoever holds it. The suite's other workers hold the profiles' default port for
    seconds at a time (tests of a taken port), and one that let go while the notice ran left it
    nothing to say: a run that said nothing while the port was not this test's is run again. A
    run while this test held the port is the answer, whatever it said."""
    for _ in range(20):
        with socket.socket() as own:
            try:
                own.bind(("127.0.0.1", port))
                own.listen()
                owned = True
            except OSError:
                owned = False  # a person's server, the demo's release, another test
            out = _notice()
        if owned or f"port {port} on 127.0.0.1 is in use" in out.stdout:
            return out
        time.sleep(0.5)
    raise AssertionError(f"port {port} was let go during each of 20 runs of the notice")


def test_a_busy_default_port_is_said_and_the_run_goes_on():
    out = _notice_with_the_port_busy(30000)
    assert out.returncode == 0, out.stderr
    assert "before the tests, on this host (the suite goes on; nothing here is touched):" in out.stdout
    assert "port 30000 on 127.0.0.1 is in use: the tests avoid it" in out.stdout


def test_the_makefile_says_it_before_pytest_starts():
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert recipe.index("scripts/test-notice.sh") < recipe.index("-m pytest")


def test_a_missing_host_program_is_named_with_its_package_and_the_run_goes_on(tmp_path):
    # a PATH holding only what the notice itself runs: no browser, terminal or promtool on it
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for prog in ("docker", "cut", "sort", "tr", "xargs", "grep", "dirname", "id"):
        found = subprocess.run(
            ["bash", "-c", f"command -v {prog}"], capture_output=True, text=True
        ).stdout.strip()
        if found:
            (bin_dir / prog).symlink_to(found)
    out = _notice(env={"PATH": str(bin_dir), "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    for prog, package in (("chromium", "chromium"), ("tmux", "tmux"), ("promtool", "prometheus")):
        assert f"{prog} is not installed" in out.stdout and f"apt-get install {package}" in out.stdout, (
            out.stdout
        )


def test_installing_the_host_programs_where_apt_cannot_is_said_and_only_the_optional_form_goes_on(tmp_path):
    # `make test` asks for the optional install: where no apt-get can run it names the packages
    # and exits 0, so the suite starts and those tests skip; `make test-tools` itself fails
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for prog in ("cut", "sort", "tr", "id"):
        found = subprocess.run(
            ["bash", "-c", f"command -v {prog}"], capture_output=True, text=True
        ).stdout.strip()
        if found:
            (bin_dir / prog).symlink_to(found)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    script = str(ROOT / "scripts" / "test-tools.sh")
    optional = subprocess.run(
        ["/bin/bash", script, "install", "--optional"], capture_output=True, text=True, timeout=60, env=env
    )
    strict = subprocess.run(
        ["/bin/bash", script, "install"], capture_output=True, text=True, timeout=60, env=env
    )
    assert optional.returncode == 0 and strict.returncode == 1, (optional, strict)
    for out in (optional, strict):
        assert "needs root and apt-get to install:" in out.stderr and "chromium" in out.stderr, out.stderr


def test_make_test_installs_the_host_programs_and_checkov_unless_told_not_to():
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/test-tools.sh install --optional" in recipe and "checkov" in recipe
    assert recipe.count('"$(TEST_TOOLS)" != 0') == 2
    # the host programs' apt-get runs after the engine's, never beside it (one package lock)
    assert recipe.index("ensure-engine.sh") < recipe.index("test-tools.sh install")
