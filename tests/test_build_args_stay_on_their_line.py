"""`image.build_args` become `ARG NAME="VALUE"` lines of the Dockerfile: a name is an identifier,
a value is one line, and the template quotes it, so a profile cannot add a Dockerfile line."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from deploytool.errors import ProfileError
from deploytool.image.build import dockerfile_quote, plan_build
from deploytool.profiles import ProfileStore

CARD = "rtx5090-qwen3.6-35b-a3b-nvfp4"


def _child(tmp_path, build_args: str):
    (tmp_path / "child.yaml").write_text(
        f"name: child\nextends: {CARD}\nimage:\n  build_args: {build_args}\n"
    )
    return ProfileStore([tmp_path])


@pytest.mark.parametrize(
    "build_args",
    [
        '{X: "1\\nRUN touch /pwned"}',
        '{X: "1\\rRUN x"}',
        '{"X=1\\nRUN x": "1"}',
        '{"BAD NAME": "1"}',
        '{"1X": "1"}',
        '{"X": "a\\u0000b"}',
    ],
)
def test_a_build_arg_that_would_write_a_line_is_refused(tmp_path, build_args):
    with pytest.raises(ProfileError, match="build_args"):
        _child(tmp_path, build_args).get("child")


def test_a_value_is_one_quoted_word_on_its_arg_line(tmp_path):
    profile = _child(tmp_path, """{TRICKY: 'a "b" $HOME \\ c'}""").get("child")
    dockerfile = plan_build(profile).dockerfile
    [line] = [x for x in dockerfile.splitlines() if x.startswith("ARG TRICKY=")]
    assert line == 'ARG TRICKY="a \\"b\\" \\$HOME \\\\ c"'


def test_docker_reads_the_quoted_value_back_unchanged(tmp_path, docker_engine):
    value = 'a "b" $HOME \\ c; RUN x'
    (tmp_path / "Dockerfile").write_text(
        f'FROM deploytool/base:bookworm\nARG TRICKY={dockerfile_quote(value)}\nRUN printf %s "$TRICKY" > /value\n'
    )
    tag = f"deploytool-test/build-args:{uuid.uuid4().hex[:12]}"
    if subprocess.run(
        ["docker", "image", "inspect", "deploytool/base:bookworm"], capture_output=True
    ).returncode:
        pytest.skip("no deploytool/base:bookworm image (make base-image)")
    try:
        subprocess.run(
            ["docker", "build", "-q", "-t", tag, str(tmp_path)], check=True, capture_output=True, timeout=300
        )
        out = subprocess.run(
            ["docker", "run", "--rm", tag, "cat", "/value"],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        assert out.stdout == value
    finally:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True)
