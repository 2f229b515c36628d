"""`profiles check`: the launch flags of every shipped sglang profile against the real parser
of its pinned sglang (deploytool's parser venv, made once into the shared test cache), and
bad flags named one by one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploytool.image import flagcheck
from deploytool.image.build import plan_build
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


@pytest.mark.usefixtures("sglang_parser_python")
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


@pytest.mark.usefixtures("sglang_parser_python")
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


@pytest.mark.usefixtures("sglang_parser_python")
def test_cli_names_the_flag_and_exits_non_zero(tmp_path: Path) -> None:
    folder = _bad_profiles(tmp_path)
    result = CliRunner().invoke(app, ["profiles", "check", "--profile", "bad-flags", "--no-image", "--json",
                                      "--profiles-dir", str(folder)])
    assert result.exit_code == 1
    data = json.loads(result.stdout[result.stdout.index("{"):])
    assert data["ok"] is False
    failed = {f["flag"]: f["status"] for f in data["findings"] if f["status"] not in ("ok", "redundant")}
    assert failed == {"--mem-fraction-statc": "unknown", "--moe-runner-backend": "invalid_choice",
                      "--tp-size": "wrong_type"}

    result = CliRunner().invoke(app, ["profiles", "check", "--profile", CARD, "--no-image"])
    assert result.exit_code == 0, result.output
    assert "all flags accepted" in result.stdout


def test_the_sim_profile_is_not_an_sglang_profile() -> None:
    with pytest.raises(UsageError, match="recipe 'sim'"):
        flagcheck.check(ProfileStore().get("sim"), use_image=False)


# -- regressions -------------------------------------------------------------------------------
@pytest.mark.usefixtures("sglang_parser_python")
def test_a_misspelt_flag_set_to_false_or_null_is_still_named(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "off.yaml").write_text(
        f"name: off-flags\nextends: {CARD}\nserver:\n  args:\n"
        "    enable-metrics: false\n"      # a real flag, left off: fine
        "    enable-metrix: false\n"       # misspelt, left off: never reached the parser before
    )
    profile = ProfileStore([folder]).get("off-flags")
    # null (a profile's own null deletes an inherited key, so set here): left off as well
    args = {**profile.server.args, "disable-radix-cach": None}
    profile = profile.model_copy(update={"server": profile.server.model_copy(update={"args": args})})
    assert "--enable-metrix" not in [g[0] for g in flagcheck.flag_groups(profile)]
    result = flagcheck.check(profile, use_image=False)
    assert not result.ok
    by_flag = {f.flag: f for f in result.failures}
    assert set(by_flag) == {"--enable-metrix", "--disable-radix-cach"}
    assert by_flag["--enable-metrix"].status == "unknown" and by_flag["--enable-metrix"].given is False
    assert "--enable-metrics" in by_flag["--enable-metrix"].suggestions
    assert by_flag["--disable-radix-cach"].status == "unknown"


class _Image:
    def __init__(self, tag: str, sglang: str | None, created: str):
        self.tags, self.id = [tag], "sha256:" + tag
        self.attrs = {"Created": created}
        self.labels = {} if sglang is None else {"dev.deploytool.toolchain": json.dumps({"sglang": sglang})}


def _fake_engine(monkeypatch: pytest.MonkeyPatch, images: list[_Image]) -> None:
    import docker

    class Images:
        def list(self, filters: dict) -> list[_Image]:
            return images

    class Client:
        images = Images()

        def ping(self) -> bool:
            return True

    monkeypatch.setattr(docker, "from_env", lambda timeout=10: Client())


def test_a_built_image_of_another_sglang_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = ProfileStore().get(CARD)
    pinned = profile.image.runtime_version
    # runtime_version bumped without a rebuild: the only image has the old sglang's parser
    _fake_engine(monkeypatch, [_Image("deploytool/sglang:old", "0.5.22", "2026-01-02"),
                               _Image("deploytool/sglang:nolabel", None, "2026-01-03")])
    assert flagcheck.built_image(profile) is None
    image, why = flagcheck.find_built_image(profile)
    assert image is None and "0.5.22" in why and pinned in why
    result = flagcheck.check(profile)
    assert result.where.startswith("venv ") and "0.5.22" in result.where and result.ok
    # an image of the pinned sglang is taken, even when an older-sglang one is newer; it is not
    # the one the profile's inputs give, so the note says which image was used instead
    _fake_engine(monkeypatch, [_Image("deploytool/sglang:new", pinned, "2026-01-01"),
                               _Image("deploytool/sglang:old", "0.5.22", "2026-01-02")])
    image, note = flagcheck.find_built_image(profile)
    assert image == "deploytool/sglang:new"
    assert "newest image labelled" in note and f"{plan_build(profile).tag}, what the profile's current inputs give" in note


def test_the_image_of_the_profiles_current_inputs_is_preferred_to_a_newer_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared engine keeps images of other checkouts and earlier runs, and a build that found
    its tag keeps its old creation time: the exact tag wins over the newest labelled image."""
    profile = ProfileStore().get(CARD)
    pinned = profile.image.runtime_version
    exact = plan_build(profile).tag
    _fake_engine(monkeypatch, [_Image(exact, pinned, "2026-01-01"),
                               _Image("deploytool/sglang:other-checkout", pinned, "2026-03-01")])
    assert flagcheck.find_built_image(profile) == (exact, None)
    # with only the other image, it is used and named with the reason
    _fake_engine(monkeypatch, [_Image("deploytool/sglang:other-checkout", pinned, "2026-03-01")])
    image, note = flagcheck.find_built_image(profile)
    assert image == "deploytool/sglang:other-checkout" and "built 2026-03-01" in note and exact in note


def test_parser_venv_takes_torch_from_the_configured_index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess

    calls: list[list[str]] = []

    class NoVenv:
        def __init__(self, **kwargs: object) -> None:
            pass

        def create(self, path: Path) -> None:
            (path / "bin").mkdir(parents=True, exist_ok=True)
            (path / "bin" / "python").write_text("")

    def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(flagcheck, "cache_dir", lambda *parts: tmp_path.joinpath(*parts))
    monkeypatch.setattr(flagcheck, "sglang_wheel", lambda version, python: tmp_path / "sglang.whl")
    monkeypatch.setattr(flagcheck.venv, "EnvBuilder", NoVenv)
    monkeypatch.setattr(flagcheck.subprocess, "run", run)
    monkeypatch.setenv("DEPLOYTOOL_TORCH_INDEX_URL", "file:///srv/cpu-torch/simple")
    flagcheck.parser_venv("0.5.23")
    torch_steps = [c for c in calls if any(a.startswith("torch==") for a in c)]
    assert len(torch_steps) == 1 and torch_steps[0][-3:] == ["--index-url", "file:///srv/cpu-torch/simple", "torch==2.13.0"]
    assert all("--index-url" not in c for c in calls if c is not torch_steps[0])  # the torch step only
    assert "not set" not in capsys.readouterr().err

    calls.clear()
    monkeypatch.delenv("DEPLOYTOOL_TORCH_INDEX_URL")
    flagcheck.parser_venv("0.5.23")  # another index: the venv is made again
    assert calls and all("--index-url" not in c for c in calls)
    err = capsys.readouterr().err
    assert "DEPLOYTOOL_TORCH_INDEX_URL is not set" in err and "CUDA build" in err
