"""The key rule reads a command item as a shell would. A profile whose `server.command` is a
shell wrapper (`sh -c "exec python -m ... --api-key K \"$@\""`) hides the key flag inside one
argv item: it must be refused at load like the flag on its own, and so must a key flag in an
environment value a wrapper expands into its command line. Through the CLI, compose and
Kubernetes alike: nothing is written, the refusal names the field and index, never the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

DIGEST = "example/sim@sha256:" + "0" * 64

CANARY = "sk-CANARY-5e1d2a77"
WRAPPER = (
    'server:\n  command: ["/bin/sh", "-c", '
    f'"exec /opt/venv/bin/python -m deploytool.sim --api-key {CANARY} \\"$@\\"", "sh"]\n'
)


@pytest.mark.parametrize(
    "body, field, reading",
    [
        (WRAPPER, "server.command.2", None),
        (
            'server:\n  command: ["/bin/sh", "-c", '
            f'"exec /opt/venv/bin/python -m deploytool.sim --api-ke={CANARY}"]\n',
            "server.command.2",
            "reads '--api-ke' as --api-key",
        ),
        # an unclosed quote: no shell split, but its words are still read
        (
            f'server:\n  command: ["/bin/sh", "-c", "exec python -m deploytool.sim \'--adm {CANARY}"]\n',
            "server.command.2",
            None,
        ),
        (
            f'server:\n  env: {{EXTRA_ARGS: "--log-level info --admin-api-key {CANARY}"}}\n',
            "server.env.EXTRA_ARGS",
            None,
        ),
    ],
)
@pytest.mark.parametrize("target", ["compose", "k8s"])
def test_render_refuses_a_key_inside_a_shell_words_item(tmp_path: Path, body, field, reading, target):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "wrapped.yaml").write_text(f"name: wrapped\nextends: sim\n{body}")
    written = tmp_path / "c.yaml"
    flags = (
        ("--cpu", "--image", "x:y", "-o", str(written))
        if target == "compose"
        else ("--k8s", "--image", DIGEST, "--qualify-image", DIGEST, "-o", str(tmp_path / "k8s"))
    )
    out = run_cli("render", *flags, "--profile", "wrapped", "--profiles-dir", str(folder), timeout=120)
    text = " ".join(out.stderr.split())
    assert out.returncode == 2, out.stdout + out.stderr
    assert "wrapped.yaml:" in text and f"{field}:" in text, out.stderr
    assert "server.api_key: {env: NAME} or {file: PATH}" in text
    if reading:
        assert reading in text
    assert CANARY not in out.stdout + out.stderr
    assert not written.exists() and not (tmp_path / "k8s").exists()


def test_a_wrapper_without_a_key_still_renders(tmp_path: Path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "wrapped.yaml").write_text(
        'name: wrapped\nextends: sim\nserver:\n  command: ["/bin/sh", "-c", '
        '"exec /opt/venv/bin/python -m deploytool.sim --log-level info \\"$@\\"", "sh"]\n'
        '  env: {NOTE: "--apis are not keys"}\n'
    )
    out = run_cli("render", "--cpu", "--image", "x:y", "--profile", "wrapped", "--profiles-dir", str(folder))
    assert out.returncode == 0, out.stderr
