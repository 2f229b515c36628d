"""`profiles check`: the launch flags of every shipped sglang profile against the real parser
of its pinned sglang (deploytool's parser venv, made once into the shared test cache), and
bad flags named one by one."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
from conftest import run_cli
from typer.testing import CliRunner

from deploytool.cli import app
from deploytool.errors import UsageError
from deploytool.image import flagcheck, parser_env
from deploytool.image.build import plan_build
from deploytool.profiles import ProfileStore

CARD = "rtx5090-qwen3.6-35b-a3b-nvfp4"


def _sglang_profiles() -> list[str]:
    store = ProfileStore()
    return [n for n in store.names() if store.get(n).image.recipe == "sglang"]


def test_flag_groups_follow_the_launch_command() -> None:
    profile = ProfileStore().get(CARD)
    groups = flagcheck.flag_groups(profile)
    assert [t for g in groups for t in g] == profile.launch_argv()[len(profile.server.command) :]
    assert ["--moe-runner-backend", "cutlass"] in groups and ["--enable-multimodal"] in groups


def _off_flags_profile(folder: Path):
    """Misspelt flags whose value keeps them off the command line (false, null): only their names
    reach the parser, and they must still be named."""
    (folder / "off.yaml").write_text(
        f"name: off-flags\nextends: {CARD}\nserver:\n  args:\n"
        "    enable-metrics: false\n"  # a real flag, left off: fine
        "    enable-metrix: false\n"  # misspelt, left off: never reached the parser before
    )
    profile = ProfileStore([folder]).get("off-flags")
    # null (a profile's own null deletes an inherited key, so set here): left off as well
    args = {**profile.server.args, "disable-radix-cach": None}
    return profile.model_copy(update={"server": profile.server.model_copy(update={"args": args})})


AFTER_BAD = (CARD, "after bad-flags")  # shipped_checks' key of CARD's second answer
REAL_PROBE = flagcheck._probe


class _Parser:
    """sglang's real parser, each question answered once per module: a question asked again of
    the same parser (the same place, the same request) gets the answer that parser gave it earlier
    in the module, so several checks and CLI invocations read one start-up of sglang's real
    answers (the import is most of a check's cost). `calls` holds the profiles of every probe a
    check asked for (one list a probe process), `started` those of each real start-up."""

    def __init__(self) -> None:
        self.answered: dict[tuple, dict] = {}
        self.calls: list[list[str]] = []
        self.started: list[list[str]] = []

    def probe(self, place, requests, *, names, timeout):
        self.calls.append(list(names))
        # the same parser: the same venv, whichever test's home (a link to the shared cache) named it
        where = (place.image, place.python and os.path.realpath(place.python.parent.parent), place.pythonpath)
        keys = [(where, json.dumps(request, sort_keys=True)) for request in requests]
        new = [i for i, key in enumerate(keys) if key not in self.answered]
        if new:
            self.started.append([names[i] for i in new])
            answers = REAL_PROBE(
                place, [requests[i] for i in new], names=[names[i] for i in new], timeout=timeout
            )
            self.answered.update({keys[i]: answer for i, answer in zip(new, answers, strict=True)})
        return [copy.deepcopy(self.answered[key]) for key in keys]


@pytest.fixture(scope="module")
def parser(sglang_parser_python: Path):
    """The module's checks ask sglang's parser through one _Parser."""
    one = _Parser()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flagcheck, "_probe", one.probe)
        yield one


@pytest.fixture(scope="module")
def shipped_checks(parser: _Parser, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every shipped sglang profile checked in one parser process, as `profiles check --all` does,
    after a failing one (off-flags, also here), each after the ones before it; then bad-flags
    (three bad flags) and CARD once more after it, under AFTER_BAD. One start-up of sglang (the
    import is most of a check's cost) answers the tests that read these, and (through `parser`)
    the same questions asked again by the CLI."""
    store = ProfileStore()
    off = _off_flags_profile(tmp_path_factory.mktemp("off-flags"))
    bad = ProfileStore([_bad_profiles(tmp_path_factory.mktemp("bad-flags"))]).get("bad-flags")
    started = len(parser.started)
    batch = [off, *(store.get(n) for n in _sglang_profiles()), bad, store.get(CARD)]
    *checks, bad_check, card_again = flagcheck.check_many(batch, use_image=False)
    # one probe process for the whole batch, CARD's second question in it too
    assert parser.calls[-1] == [p.name for p in batch], parser.calls[-1]
    assert parser.started[started:] in ([], [[p.name for p in batch]]), parser.started[started:]
    return {**{r.profile: r for r in checks}, "bad-flags": bad_check, AFTER_BAD: card_again}


@pytest.mark.parametrize("name", _sglang_profiles())
def test_every_shipped_profile_passes_the_real_parser(name: str, shipped_checks: dict) -> None:
    profile = ProfileStore().get(name)
    result = shipped_checks[name]
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
        "    mem-fraction-statc: 0.9\n"  # misspelt
        "    moe-runner-backend: cutlas\n"  # not a choice
        "    tp-size: eight\n"  # not an int
    )
    return folder


def test_misspelt_flag_bad_choice_and_wrong_type_are_each_named(shipped_checks: dict) -> None:
    # with CARD after it in the same process: CARD's answer there is the one it got earlier in
    # the shipped batch: what went before (a profile of three bad flags) leaves an answer as it was
    result, after = shipped_checks["bad-flags"], shipped_checks[AFTER_BAD]
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
    assert after.ok and after.findings == shipped_checks[CARD].findings


def test_cli_names_the_flag_and_exits_non_zero(tmp_path: Path, parser: _Parser, shipped_checks: dict) -> None:
    folder = _bad_profiles(tmp_path)
    started, calls = len(parser.started), len(parser.calls)
    # --all: every sglang profile, the folder's with the shipped ones; the failing one's flags
    # shown, a line for each that passed, the sim profiles skipped with why
    result = CliRunner().invoke(
        app, ["profiles", "check", "--all", "--no-image", "--profiles-dir", str(folder)], terminal_width=400
    )
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert any(line.startswith(f"{CARD}: sglang ") and line.endswith("all flags accepted") for line in lines)
    assert any(line.startswith("bad-flags: sglang ") and line.endswith("3 problem(s)") for line in lines)
    assert "--mem-fraction-statc" in result.stdout and "sim: skipped (recipe 'sim'" in result.stdout
    assert sum(line.endswith("all flags accepted") for line in lines) == len(_sglang_profiles())
    # --all asked sglang's parser in one probe process, every profile in it
    assert len(parser.calls) == calls + 1, parser.calls[calls:]
    assert set(parser.calls[-1]) == {"bad-flags", *_sglang_profiles()}

    # one profile, --json: the failing one's findings (the parser's answer --all got above)
    result = CliRunner().invoke(
        app,
        [
            "profiles",
            "check",
            "--profile",
            "bad-flags",
            "--no-image",
            "--json",
            "--profiles-dir",
            str(folder),
        ],
    )
    assert result.exit_code == 1
    data = json.loads(result.stdout[result.stdout.index("{") :])
    assert data["ok"] is False
    failed = {f["flag"]: f["status"] for f in data["findings"] if f["status"] not in ("ok", "redundant")}
    assert failed == {
        "--mem-fraction-statc": "unknown",
        "--moe-runner-backend": "invalid_choice",
        "--tp-size": "wrong_type",
    }

    both = run_cli("profiles", "check", "--all", "--profile", CARD, "--json")
    assert both.returncode == 2 and "one of the two" in json.loads(both.stdout)["error"]["message"]

    # one profile: its every flag in the table, then the summary
    result = CliRunner().invoke(
        app, ["profiles", "check", "--profile", CARD, "--no-image"], terminal_width=400
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip().endswith("all flags accepted")
    assert all(group[0] in result.stdout for group in flagcheck.flag_groups(ProfileStore().get(CARD)))
    # every question of the three (--all's and the single-profile forms') was one the library's
    # check_many had asked in shipped_checks, word for word: its one start-up of sglang answered all
    assert parser.started[started:] == [], parser.started[started:]


@pytest.mark.usefixtures("sglang_parser_python")
def test_a_probe_that_breaks_on_one_profile_still_answers_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    # a start-up of its own: the profiles around the broken one answered in the same process
    monkeypatch.setattr(flagcheck, "_probe", REAL_PROBE)
    # a request the probe cannot read (no "groups") stands in for a profile that breaks the probe
    request = flagcheck._request
    monkeypatch.setattr(
        flagcheck,
        "_request",
        lambda profile, resolve: {"names_only": []} if profile.name == CARD else request(profile, resolve),
    )
    result = CliRunner().invoke(app, ["profiles", "check", "--all", "--no-image", "--json"])
    assert result.exit_code == 6, result.output  # could not run: nothing is known of CARD's flags
    data = json.loads(result.stdout)
    by_name = {p["profile"]: p for p in data["profiles"]}
    assert list(by_name) == _sglang_profiles() and data["ok"] is False
    assert by_name[CARD]["probe_error"] == "KeyError: 'groups'" and by_name[CARD]["findings"] == []
    assert by_name[CARD]["parser_error"] is None and by_name[CARD]["ok"] is False
    for name, report in by_name.items():
        if name != CARD:  # answered in the same process, before and after it, in full
            assert report["ok"] and report["probe_error"] is None
            assert len(report["findings"]) == len(flagcheck.flag_groups(ProfileStore().get(name)))


def test_the_sim_profile_is_not_an_sglang_profile() -> None:
    with pytest.raises(UsageError, match="recipe 'sim'"):
        flagcheck.check(ProfileStore().get("sim"), use_image=False)


# -- regressions -------------------------------------------------------------------------------
def test_a_misspelt_flag_set_to_false_or_null_is_still_named(tmp_path: Path, shipped_checks: dict) -> None:
    assert "--enable-metrix" not in [g[0] for g in flagcheck.flag_groups(_off_flags_profile(tmp_path))]
    result = shipped_checks["off-flags"]
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


def test_a_built_image_of_another_sglang_is_not_used(
    monkeypatch: pytest.MonkeyPatch, parser: _Parser, shipped_checks: dict
) -> None:
    profile = ProfileStore().get(CARD)
    pinned = profile.image.runtime_version
    # runtime_version bumped without a rebuild: the only image has the old sglang's parser
    _fake_engine(
        monkeypatch,
        [
            _Image("deploytool/sglang:old", "0.5.22", "2026-01-02"),
            _Image("deploytool/sglang:nolabel", None, "2026-01-03"),
        ],
    )
    assert flagcheck.built_image(profile) is None
    image, why = flagcheck.find_built_image(profile)
    assert image is None and "0.5.22" in why and pinned in why
    result = flagcheck.check(profile)  # the venv's parser (its answer to CARD: shipped_checks')
    assert result.where.startswith("venv ") and "0.5.22" in result.where and result.ok
    assert parser.calls[-1] == [CARD]
    # an image of the pinned sglang is taken, even when an older-sglang one is newer; it is not
    # the one the profile's inputs give, so the note says which image was used instead
    _fake_engine(
        monkeypatch,
        [
            _Image("deploytool/sglang:new", pinned, "2026-01-01"),
            _Image("deploytool/sglang:old", "0.5.22", "2026-01-02"),
        ],
    )
    image, note = flagcheck.find_built_image(profile)
    assert image == "deploytool/sglang:new"
    assert (
        "newest image labelled" in note
        and f"{plan_build(profile).tag}, what the profile's current inputs give" in note
    )


def test_a_profile_without_a_pinned_sglang_finds_no_image_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A library caller may ask about a profile whose image.runtime_version is unset: no image
    can hold its sglang, and the note says why (not a TypeError while wording the note)."""
    profile = ProfileStore().get(CARD)
    unpinned = profile.model_copy(
        update={"image": profile.image.model_copy(update={"runtime_version": None})}
    )
    _fake_engine(monkeypatch, [_Image("deploytool/sglang:old", "0.5.22", "2026-01-02")])
    assert flagcheck.find_built_image(unpinned) == (
        None,
        "image.runtime_version (the sglang release) is not set",
    )


def test_the_image_of_the_profiles_current_inputs_is_preferred_to_a_newer_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shared engine keeps images of other checkouts and earlier runs, and a build that found
    its tag keeps its old creation time: the exact tag wins over the newest labelled image."""
    profile = ProfileStore().get(CARD)
    pinned = profile.image.runtime_version
    exact = plan_build(profile).tag
    _fake_engine(
        monkeypatch,
        [
            _Image(exact, pinned, "2026-01-01"),
            _Image("deploytool/sglang:other-checkout", pinned, "2026-03-01"),
        ],
    )
    assert flagcheck.find_built_image(profile) == (exact, None)
    # with only the other image, it is used and named with the reason
    _fake_engine(monkeypatch, [_Image("deploytool/sglang:other-checkout", pinned, "2026-03-01")])
    image, note = flagcheck.find_built_image(profile)
    assert image == "deploytool/sglang:other-checkout" and "built 2026-03-01" in note and exact in note


def test_parser_venv_takes_torch_from_the_configured_index(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
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

    monkeypatch.setattr(parser_env, "cache_dir", lambda *parts: tmp_path.joinpath(*parts))
    monkeypatch.setattr(parser_env, "sglang_wheel", lambda version, python: tmp_path / "sglang.whl")
    monkeypatch.setattr(parser_env.venv, "EnvBuilder", NoVenv)
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setenv("DEPLOYTOOL_TORCH_INDEX_URL", "file:///srv/cpu-torch/simple")
    parser_env.parser_venv("0.5.23")
    torch_steps = [c for c in calls if any(a.startswith("torch==") for a in c)]
    assert len(torch_steps) == 1 and torch_steps[0][-3:] == [
        "--index-url",
        "file:///srv/cpu-torch/simple",
        "torch==2.13.0",
    ]
    assert all("--index-url" not in c for c in calls if c is not torch_steps[0])  # the torch step only
    assert "not set" not in capsys.readouterr().err

    calls.clear()
    monkeypatch.delenv("DEPLOYTOOL_TORCH_INDEX_URL")
    parser_env.parser_venv("0.5.23")  # another index: the venv is made again
    assert calls and all("--index-url" not in c for c in calls)
    err = capsys.readouterr().err
    assert "DEPLOYTOOL_TORCH_INDEX_URL is not set" in err and "CUDA build" in err
