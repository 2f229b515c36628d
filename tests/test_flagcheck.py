"""`profiles check`: the launch flags of every shipped sglang profile against the real parser
of its pinned sglang (deploytool's parser venv, made once into the shared test cache), and
bad flags named one by one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploytool import flagcheck
from deploytool.cli import app
from deploytool.errors import UsageError
from deploytool.profiles import ProfileStore

CARD = "rtx5090-qwen3.6-35b-a3b-nvfp4"


def _sglang_profiles() -> list[str]:
    store = ProfileStore()
    return [n for n in store.names() if store.get(n).image.recipe == "sglang"]


def test_flag_groups_follow_the_launch_command() -> None:
    profile = ProfileStore().get(CARD)
    groups = flagcheck.flag_groups(profile)
    assert [t for g in groups for t in g] == profile.launch_argv()[len(profile.server.command):]
    assert ["--moe-runner-backend", "cutlass"] in groups and ["--enable-multimodal"] in groups


@pytest.mark.parametrize("name", _sglang_profiles())
def test_every_shipped_profile_passes_the_real_parser(name: str) -> None:
    profile = ProfileStore().get(name)
    result = flagcheck.check(profile, use_image=False)
    assert result.where.startswith("venv ")
    assert result.sglang_version == profile.image.runtime_version
    assert result.ok, [(f.flag, f.status, f.message) for f in result.failures] or result.parser_error
    assert len(result.findings) == len(flagcheck.flag_groups(profile))
    # every flag reached sglang's ServerArgs with the value given
    stored = {f.flag: f.stored for f in result.findings}
    assert stored["--max-running-requests"] == profile.server.args["max-running-requests"]
    assert stored["--mem-fraction-static"] == pytest.approx(profile.server.args["mem-fraction-static"])


def _bad_profiles(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "bad.yaml").write_text(
        f"name: bad-flags\nextends: {CARD}\nserver:\n  args:\n"
        "    mem-fraction-statc: 0.9\n"        # misspelt
        "    moe-runner-backend: cutlas\n"     # not a choice
        "    tp-size: eight\n"                 # not an int
    )
    return folder


def test_misspelt_flag_bad_choice_and_wrong_type_are_each_named(tmp_path: Path) -> None:
    profile = ProfileStore([_bad_profiles(tmp_path)]).get("bad-flags")
    result = flagcheck.check(profile, use_image=False)
    assert not result.ok
    by_flag = {f.flag: f for f in result.failures}
    assert set(by_flag) == {"--mem-fraction-statc", "--moe-runner-backend", "--tp-size"}
    assert by_flag["--mem-fraction-statc"].status == "unknown"
    assert "--mem-fraction-static" in by_flag["--mem-fraction-statc"].suggestions
    assert by_flag["--moe-runner-backend"].status == "invalid_choice"
    assert "'cutlas'" in by_flag["--moe-runner-backend"].message
    assert by_flag["--tp-size"].status == "wrong_type"
    assert "invalid int value: 'eight'" in by_flag["--tp-size"].message
    # the good flags of the same profile are still reported as accepted
    assert {f.flag: f.status for f in result.findings}["--reasoning-parser"] == "ok"


def test_cli_names_the_flag_and_exits_non_zero(tmp_path: Path) -> None:
    folder = _bad_profiles(tmp_path)
    result = CliRunner().invoke(app, ["profiles", "check", "bad-flags", "--no-image", "--json",
                                      "--profiles-dir", str(folder)])
    assert result.exit_code == 1
    data = json.loads(result.stdout[result.stdout.index("{"):])
    assert data["ok"] is False
    failed = {f["flag"]: f["status"] for f in data["findings"] if f["status"] not in ("ok", "redundant")}
    assert failed == {"--mem-fraction-statc": "unknown", "--moe-runner-backend": "invalid_choice",
                      "--tp-size": "wrong_type"}

    result = CliRunner().invoke(app, ["profiles", "check", CARD, "--no-image"])
    assert result.exit_code == 0, result.output
    assert "all flags accepted" in result.stdout


def test_the_sim_profile_is_not_an_sglang_profile() -> None:
    with pytest.raises(UsageError, match="recipe 'sim'"):
        flagcheck.check(ProfileStore().get("sim"), use_image=False)
