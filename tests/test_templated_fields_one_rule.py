"""Every profile field that reaches a Dockerfile, a compose file or a command line is held to one
rule when the profile loads (deploytool.profiles.templated): no control character in any text
(value or key) outside the free-form gates, and the shape of its field where a template writes
it bare. `image.python` with a line break once wrote Dockerfile steps of the profile's choosing
into the sim image; now `build` refuses it, naming the file, the line, the field and what was
expected."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deploytool.errors import ProfileError
from deploytool.image.build import plan_build
from deploytool.profiles import ProfileStore

INJECTED = "RUN echo pwned > /pwned"


def child(folder: Path, doc: dict) -> ProfileStore:
    (folder / "child.yaml").write_text(yaml.safe_dump({"name": "child", "extends": "sim", **doc}))
    return ProfileStore([folder])


def test_build_refuses_a_python_version_that_writes_a_dockerfile_step(tmp_path: Path):
    child(tmp_path, {"image": {"python": f"3.11\n{INJECTED}"}})
    out = run_cli("build", "--profile", "child", "--profiles-dir", str(tmp_path), "--dry-run")
    assert out.returncode == 2, out.stdout + out.stderr
    assert INJECTED not in out.stdout
    text = " ".join(out.stderr.split())
    assert re.search(
        r"child\.yaml:\d+: image\.python: the value holds a line break \(\\n\) at character 5: "
        r"expected one line of printable text",
        text,
    ), out.stderr
    child(tmp_path, {"image": {"python": "3.11 ; touch /pwned"}})
    out = run_cli("build", "--profile", "child", "--profiles-dir", str(tmp_path), "--dry-run")
    assert (
        out.returncode == 2
        and "image.python: expected a Python version MAJOR.MINOR such as 3.11, got '3.11 ; touch /pwned'"
        in " ".join(out.stderr.split())
    ), out.stderr


@pytest.mark.parametrize(
    "doc, field, expected",
    [
        ({"image": {"base": f"deploytool/base:bookworm\n{INJECTED}"}}, "image.base", "line break"),
        ({"image": {"base": "deploytool/base:bookworm AS x"}}, "image.base", "an image reference"),
        ({"image": {"cuda": "13.0 x"}}, "image.cuda", "a CUDA version"),
        ({"image": {"runtime_version": "0.5.23; curl x | sh"}}, "image.runtime_version", "a version such as"),
        ({"image": {"torch_version": "2.14.1\nevil==1"}}, "image.torch_version", "line break"),
        ({"image": {"patches": ["../x y"]}}, "image.patches.0", "a patch name"),
        (
            {"image": {"source": {"kind": "path", "path": "/src", "subdir": "python; curl x"}}},
            "image.source.subdir",
            "a folder of the tree",
        ),
        (
            {"image": {"wheels": [{"file": "/w/a -i http:x.whl", "sha256": "0" * 64}]}},
            "image.wheels.0.file",
            "a wheel file whose name has no space",
        ),
        ({"model": {"revision": "main --upload"}}, "model.revision", "a branch, tag or commit"),
        ({"model": {"served_name": "m\u2028x"}}, "model.served_name", "U+2028"),
        ({"server": {"env": {"A B": "1"}}}, "server.env.A B", "an environment variable name"),
        ({"server": {"env": {"X": "a\rb"}}}, "server.env.X", "carriage return"),
        ({"server": {"shm_size": "1g\n"}}, "server.shm_size", "line break"),
        ({"server": {"shm_size": "lots"}}, "server.shm_size", "a size such as 32g"),
        ({"server": {"ulimits": {"no file": 1}}}, "server.ulimits.no file", "a limit name"),
        ({"server": {"args": {"x y": 1}}}, "server.args.x y", "a flag name"),
        (
            {"server": {"args": {"chat-template": "a\u001b]52;c;AAAA\u0007"}}},
            "server.args.chat-template",
            "U+001B",
        ),
        ({"server": {"command": ["/opt/venv/bin/python", "-m\tdeploytool.sim"]}}, "server.command.1", "tab"),
        ({"health": {"path": "/health -o /etc/x"}}, "health.path", "a path such as /health"),
        ({"tune": {"space": {"x": ["a\nb"]}}}, "tune.space.x.0", "line break"),
        ({"description": "two\nlines"}, "description", "line break"),
    ],
)
def test_each_templated_field_is_held_to_the_rule_at_load(tmp_path: Path, doc, field, expected):
    with pytest.raises(ProfileError) as caught:
        child(tmp_path, doc).get("child")
    message = caught.value.message
    assert re.search(rf"child\.yaml:\d+: {re.escape(field)}: ", message), message
    assert expected in message and "expected" in message, message


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONTROL = st.sampled_from(["\n", "\r", "\t", "\0", "\x1b", "\x7f", "\x85", "\x9b", "\u2028", "\u2029"])
FIELDS = [
    ("image", "python"),
    ("image", "base"),
    ("image", "runtime_version"),
    ("model", "served_name"),
    ("server", "shm_size"),
    ("health", "path"),
    ("server", "env", "HOSTILE"),
    ("server", "args", "served-model-name"),
    ("image", "build_args", "X"),
]


def nested(path: tuple[str, ...], value: str) -> dict:
    doc: object = value
    for part in reversed(path):
        doc = {part: doc}
    return doc  # type: ignore[return-value]


@SETTINGS
@given(field=st.sampled_from(FIELDS), before=st.text(max_size=5), bad=CONTROL, after=st.text(max_size=5))
def test_a_control_character_in_any_templated_field_is_refused(field, before, bad, after):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "child.yaml"
        doc = {"name": "child", "extends": "sim", **nested(field, before + bad + after)}
        path.write_text(yaml.safe_dump(doc))  # escaped: PyYAML reads a raw NEL (U+0085) back as a space
        with pytest.raises(ProfileError):
            ProfileStore([Path(folder)]).get("child")


@SETTINGS
@given(
    minor=st.integers(min_value=0, max_value=99),
    name=st.text(
        st.characters(min_codepoint=32, max_codepoint=0x2000, blacklist_categories=("Cc",)),
        min_size=1,
        max_size=20,
    ),
)
def test_what_passes_stays_on_its_line_of_the_dockerfile_and_nothing_else_passes(minor, name):
    with tempfile.TemporaryDirectory() as folder:
        profile = child(
            Path(folder), {"image": {"python": f"3.{minor}"}, "model": {"served_name": name}}
        ).get("child")
        plain = plan_build(ProfileStore().get("sim")).dockerfile
        assert len(plan_build(profile).dockerfile.splitlines()) == len(plain.splitlines())
        with pytest.raises(ProfileError, match=r"image.python"):
            child(Path(folder), {"image": {"python": f"3.{minor}\n{INJECTED}"}}).get("child")
