"""What an installed deploytool gives a person besides its data: their own profiles and hooks in
$XDG_CONFIG_HOME/deploytool (beside --profiles-dir and DEPLOYTOOL_PROFILES_PATH, each listed
with where it came from), `--version` and doctor naming the version, the Kubernetes client as
the `k8s` extra with a message that names it, and `render --k8s` naming the qualify image's
recipe. The wheel itself: tests/test_installed_wheel.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from conftest import run_cli

SIM_CHILD = "name: {name}\nextends: sim\ndescription: {description}\n"


def _profile(folder: Path, name: str, description: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(SIM_CHILD.format(name=name, description=description))


def test_profiles_from_the_user_config_folder_are_listed_with_where_each_came_from(tmp_path: Path):
    config = tmp_path / "config"
    _profile(config / "deploytool" / "profiles", "mine", "from my config")
    _profile(config / "deploytool" / "profiles", "shadowed", "from my config")
    _profile(tmp_path / "env", "shadowed", "from the variable")
    _profile(tmp_path / "env", "from-env", "from the variable")
    _profile(tmp_path / "flag", "from-flag", "from the flag")
    env = {"XDG_CONFIG_HOME": str(config), "DEPLOYTOOL_PROFILES_PATH": str(tmp_path / "env")}

    listed = run_cli("profiles", "list", "--json", "--profiles-dir", str(tmp_path / "flag"), env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)["profiles"]}
    assert rows["sim"]["origin"] == "built-in"
    assert rows["mine"]["origin"] == "user config"
    assert rows["shadowed"]["origin"] == "DEPLOYTOOL_PROFILES_PATH"  # a later folder wins
    assert rows["shadowed"]["description"] == "from the variable"
    assert rows["from-flag"]["origin"] == "--profiles-dir"

    table = run_cli("profiles", "list", env=env)
    assert table.returncode == 0, table.stderr
    assert f"user config: {config / 'deploytool' / 'profiles'}" in table.stdout
    assert "from" in table.stdout.splitlines()[1]  # the column


def test_a_relative_xdg_config_home_is_ignored_and_home_config_is_used(tmp_path: Path, monkeypatch):
    from deploytool.resources import user_config_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")
    assert user_config_dir("profiles") == tmp_path / ".config" / "deploytool" / "profiles"


def test_hooks_in_the_user_config_folder_run_without_flag_or_variable(tmp_path: Path, monkeypatch):
    from deploytool.deploy.hooks import HOOKS_ENV, hooks_folder

    monkeypatch.delenv(HOOKS_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert hooks_folder(None) is None  # no folder there: no hook runs
    folder = tmp_path / "deploytool" / "hooks"
    folder.mkdir(parents=True)
    folder.chmod(0o755)
    assert hooks_folder(None) == folder
    explicit = tmp_path / "explicit"
    explicit.mkdir(mode=0o755)
    assert hooks_folder(explicit) == explicit  # --hooks still wins
    folder.chmod(0o777)
    with pytest.raises(Exception, match="writable by group and others"):
        hooks_folder(None)  # the same refusal as any hooks folder


def test_version_names_deploytool_the_sglang_releases_and_where_its_data_is():
    from deploytool import __version__

    shown = run_cli("--version")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"deploytool {__version__}"
    assert lines[1].startswith("SGLang releases with rules: 0.5.17, 0.5.23 (memory plans: 0.5.17, 0.5.23;")
    assert lines[2].endswith("(source tree)")

    doctor = run_cli("doctor", "--json")
    assert json.loads(doctor.stdout)["deploytool"]["version"] == __version__


def test_the_kubernetes_commands_name_the_extra_when_its_client_is_missing(monkeypatch):
    from deploytool.errors import UsageError
    from deploytool.k8s.cluster import connect

    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as where the extra is not installed
    with pytest.raises(UsageError) as refused:
        connect()
    assert "deploytool[k8s]" in refused.value.hint


def test_render_k8s_without_a_qualify_image_names_its_recipe():
    digest = "1" * 64
    refused = run_cli("render", "--k8s", "--profile", "sim", "--image", f"r.example/sim@sha256:{digest}")
    assert refused.returncode != 0
    hint = refused.stderr.split("hint:", 1)[1]
    path = Path(hint.split("build the qualify image, ", 1)[1].split(" ", 1)[0])
    assert path.name == "Dockerfile" and path.parent.name == "qualify" and path.is_file()
    assert "deploytool" in path.read_text() and os.access(path, os.R_OK)
