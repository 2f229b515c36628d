"""Properties over hostile strings (newlines, `$`, `..`, NUL, quotes, unicode): a value read from
a profile stays in its field through loading, the flag rules and compose rendering, and a path
in a patch never leaves the tree it patches. Example counts are modest: the suite runs on two
cores."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from deploytool.host.slots import Slot
from deploytool.image.in_image import unidiff
from deploytool.profiles import ProfileStore, args_to_argv
from deploytool.profiles.rules import KEY_FLAGS, key_flag, key_word, launch_argv_problems
from deploytool.release.compose import RenderRequest, document_text, render_compose

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HOSTILE_PIECES = [
    "\n",
    "\r",
    "$",
    "${HF_TOKEN}",
    "$$",
    "..",
    "../",
    "/",
    "\\",
    "\x00",
    "'",
    '"',
    "`",
    "#",
    ": ",
    "- ",
    "{",
    "}",
    "[",
    "]",
    "|",
    ">",
    "&",
    "*",
    "!",
    "%",
    "@",
    "--api-key",
    "é",
    "中",
    "🙂",
    "\u202e",
    "\ufeff",
    " ",
    "\t",
]
hostile = st.lists(
    st.one_of(st.sampled_from(HOSTILE_PIECES), st.text(max_size=4)), min_size=1, max_size=8
).map("".join)
# what YAML can carry at all (it refuses most control characters, NUL among them)
yaml_safe = hostile.filter(
    lambda s: (
        all(c in "\n\t" or ord(c) >= 32 for c in s)
        and "\ufeff" not in s
        and "\x85" not in s
        and "\u2028" not in s
        and "\u2029" not in s
    )
)
SIM = ProfileStore().get("sim")


@SETTINGS
@given(env_value=yaml_safe, arg_value=yaml_safe, description=yaml_safe)
def test_a_profile_value_stays_in_its_field_through_loading(env_value, arg_value, description):
    with tempfile.TemporaryDirectory() as folder:
        doc = {
            "name": "child",
            "extends": "sim",
            "description": description,
            "server": {"env": {"HOSTILE": env_value}, "args": {"served-model-name": arg_value}},
        }
        (Path(folder) / "child.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True))
        try:
            child = ProfileStore([Path(folder)]).get("child")
        except Exception as exc:  # a refusal must be a clear error, never another field's value
            from deploytool.errors import ProfileError

            assert isinstance(exc, ProfileError), repr(exc)
            return
    assert child.server.env["HOSTILE"] == env_value
    assert child.server.args["served-model-name"] == arg_value
    assert child.description == description
    assert set(child.server.env) == set(SIM.server.env) | {"HOSTILE"}


@SETTINGS
@given(value=hostile)
def test_each_value_is_one_argv_item_after_its_flag(value):
    argv = args_to_argv({"served-model-name": value, "port": 1})
    assert argv == ["--served-model-name", value, "--port", "1"]


@SETTINGS
@given(
    dashes=st.sampled_from(["", "-", "--", "---"]),
    flag=st.sampled_from(KEY_FLAGS),
    underscores=st.booleans(),
    upper=st.booleans(),
    value=st.one_of(st.none(), hostile),
)
def test_every_spelling_of_a_key_flag_is_refused(dashes, flag, underscores, upper, value):
    spelled = dashes + (flag.replace("-", "_") if underscores else flag)
    spelled = spelled.upper() if upper else spelled
    token = spelled if value is None else f"{spelled}={value}"
    assert key_flag(token)
    if spelled.startswith("-"):  # an argv item is a flag only with its dash
        assert launch_argv_problems(["python", "-m", "x", token], {})
    assert launch_argv_problems(["python"], {spelled: value or "k"})


@SETTINGS
@given(key=hostile, value=hostile)
def test_a_flag_that_is_not_a_key_is_left_alone(key, value):
    if key_flag(key) or key_word(value):  # refused: the key-flag rule (a key flag among the value's words)
        return
    assert launch_argv_problems(["python", "-m", "x"], {key: value}) == []


@SETTINGS
@given(env_value=hostile, arg_value=hostile)
def test_compose_keeps_each_value_in_its_field_and_literal(env_value, arg_value):
    # refused: the key-flag rule, which reads the words a shell would make of each value
    assume(key_word(arg_value) is None and key_word(env_value) is None)
    profile = SIM.model_copy(deep=True)
    profile.server.env["HOSTILE"] = env_value
    profile.server.args["served-model-name"] = arg_value
    req = RenderRequest(profile=profile, slot=Slot(), release=1, image="deploytool/sim:x")
    text = document_text(render_compose(req), profile="sim", slot="cpu", release=1)
    server = yaml.safe_load(text)["services"]["server"]
    assert set(server["environment"]) == set(SIM.server.env) | {"HOSTILE"}
    # compose reads `$$` as one literal `$`: every value is that, and nothing else
    assert server["environment"]["HOSTILE"].replace("$$", "$") == env_value
    assert server["environment"]["HOSTILE"].count("$") == 2 * env_value.count("$")
    command = server["command"]
    at = command.index("--served-model-name")
    assert command[at + 1].replace("$$", "$") == arg_value


path_piece = st.one_of(
    st.sampled_from(["..", ".", "", "/", "a", "pkg", "mod.py", "\x00", "\n", "~", "\\..", "link", "é"]),
    st.text(min_size=1, max_size=3),
)
hostile_path = st.lists(path_piece, min_size=1, max_size=6).map("/".join)


@settings(max_examples=60, deadline=None)
@given(path=hostile_path, absolute=st.booleans())
def test_no_patch_path_leaves_its_tree(path, absolute):
    with tempfile.TemporaryDirectory() as scratch:
        outside = Path(scratch)
        root = outside / "tree"
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "mod.py").write_text("a = 1\n")
        (root / "link").symlink_to(outside)
        before = {p for p in outside.rglob("*") if not p.is_relative_to(root)}
        target = ("b/" + ("/" if absolute else "") + path).replace("\n", "")
        patch = f"--- /dev/null\n+++ {target}\n@@ -0,0 +1 @@\n+owned\n"
        result = unidiff.apply_patch(root, "p.patch", patch)
        after = {p for p in outside.rglob("*") if not p.is_relative_to(root)}
        assert after == before, (target, result)
        if result.applied:
            written = [
                p for p in root.rglob("*") if p.is_file() and p.read_text(errors="replace") == "owned\n"
            ]
            assert written and all(p.resolve().is_relative_to(root.resolve()) for p in written)


@SETTINGS
@given(before=hostile, after=hostile, key=st.from_regex(r"sk-[A-Za-z0-9]{8,24}", fullmatch=True))
def test_a_json_record_of_a_command_line_stays_json_and_loses_its_key(before, after, key):
    """write_json scrubs each string, then the whole text again: a key that ends its string (the
    closing quote follows it), a JSON escape after it, or hostile text around it must leave a file
    that is JSON, in which the key is nowhere."""
    from deploytool.files import write_json

    record = {
        "launch_command": f"{before} --api-key {key}",
        "cmd": [f"--api-key={key}{after}", "--api-key", key],
        "quoted": f'--api-key "{key}"',
        "tail": f"--api-key {key}\\{after}",
    }
    with tempfile.TemporaryDirectory() as folder:
        text = write_json(Path(folder) / "record.json", record).read_text()
    assert key not in text
    loaded = json.loads(text)
    assert set(loaded) == set(record) and len(loaded["cmd"]) == 3
