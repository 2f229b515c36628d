"""Profile resolution, inheritance and every way a profile can be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploytool.errors import ProfileError, UsageError
from deploytool.profiles import ProfileStore, args_to_argv, deep_merge

CHILD = """\
name: child
extends: sim
description: a child of sim
server:
  args:
    decode-tps: 999
    gsm8k-oracle: null
  env:
    EXTRA: 1
    FLAG: true
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def test_builtin_profiles_resolve():
    store = ProfileStore()
    assert {"sim", "sim-v2"} <= set(store.names())
    sim = store.get("sim")
    assert sim.is_simulator and sim.server.port == 30000
    v2 = store.get("sim-v2")
    assert v2.chain == ["sim-v2", "sim"]
    assert v2.server.args["decode-tps"] == 400 and v2.server.args["startup-seconds"] == 2


def test_extends_merges_mappings_and_null_deletes(tmp_path: Path):
    write(tmp_path, "child", CHILD)
    child = ProfileStore([tmp_path]).get("child")
    assert child.server.args["decode-tps"] == 999
    assert "gsm8k-oracle" not in child.server.args  # null removed the parent's flag
    assert child.server.args["served-model-name"] == "sim-model"  # inherited
    assert child.server.env == {"EXTRA": "1", "FLAG": "true"}  # YAML scalars become text
    assert child.source.endswith("child.yaml")


def test_user_folder_overrides_builtin_and_env_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    write(env_dir, "sim", Path("profiles/sim.yaml").read_text().replace("decode-tps: 200", "decode-tps: 7"))
    monkeypatch.setenv("DEPLOYTOOL_PROFILES_PATH", str(env_dir))
    assert ProfileStore().get("sim").server.args["decode-tps"] == 7


def test_launch_argv_follows_sglang_flag_style():
    argv = args_to_argv({"tp-size": 8, "enable-x": True, "off": False, "none": None, "many": ["a", 2]})
    assert argv == ["--tp-size", "8", "--enable-x", "--many", "a", "2"]


def test_deep_merge_replaces_lists_whole():
    assert deep_merge({"a": [1, 2], "b": {"c": 1}}, {"a": [3], "b": {"d": 2}}) == {
        "a": [3],
        "b": {"c": 1, "d": 2},
    }


@pytest.mark.parametrize(
    "text, expected",
    [
        (CHILD.replace("description:", "descripton:"), ["child.yaml:3", "descripton", "unknown field"]),
        (CHILD.replace("decode-tps: 999", "decode-tps: {a: 1}"), ["child.yaml:6", "server.args.decode-tps"]),
        (CHILD + "health:\n  retries: many\n", ["child.yaml:12", "health.retries", "'many'"]),
        (
            CHILD.replace("name: child", "name: child\nmodel:\n  context_length: -5"),
            ["child.yaml:3", "model.context_length", "greater than 0"],
        ),
    ],
    ids=["unknown-key", "wrong-type-arg", "wrong-type-int", "bad-value"],
)
def test_bad_profile_names_file_line_and_field(tmp_path: Path, text: str, expected: list[str]):
    write(tmp_path, "child", text)
    with pytest.raises(ProfileError) as err:
        ProfileStore([tmp_path]).get("child")
    for piece in expected:
        assert piece in str(err.value), str(err.value)


def test_missing_field_is_named(tmp_path: Path):
    write(
        tmp_path, "lonely", "name: lonely\nimage: {recipe: sim, base: x}\nserver: {port: 1, command: [x]}\n"
    )
    with pytest.raises(ProfileError) as err:
        ProfileStore([tmp_path]).get("lonely")
    assert "model: required field is missing" in str(err.value)
    assert "lonely.yaml" in str(err.value)


def test_extends_cycle_is_refused(tmp_path: Path):
    write(tmp_path, "a", "name: a\nextends: b\n")
    write(tmp_path, "b", "name: b\nextends: a\n")
    with pytest.raises(ProfileError, match=r"cycle: a -> b -> a") as err:
        ProfileStore([tmp_path]).get("a")
    assert "b.yaml:2" in str(err.value)


def test_extends_unknown_parent(tmp_path: Path):
    write(tmp_path, "orphan", "name: orphan\nextends: nobody\n")
    with pytest.raises(ProfileError, match=r"orphan.yaml:2: 'extends' names unknown profile 'nobody'"):
        ProfileStore([tmp_path]).get("orphan")


def test_malformed_yaml_reports_line_and_column(tmp_path: Path):
    write(tmp_path, "broken", "name: broken\nserver: {port: 1\n")
    with pytest.raises(UsageError, match=r"broken.yaml:3:1: malformed YAML"):
        ProfileStore([tmp_path])


def test_unknown_profile_lists_known_ones():
    with pytest.raises(ProfileError) as err:
        ProfileStore().get("nope")
    assert "unknown profile 'nope'" in err.value.message and "sim" in (err.value.hint or "")


def test_missing_profiles_dir(tmp_path: Path):
    with pytest.raises(UsageError, match="does not exist"):
        ProfileStore([tmp_path / "absent"])
