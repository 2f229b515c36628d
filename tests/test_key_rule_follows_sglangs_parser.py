"""The key rule follows the runtime's own parser. SGLang's server parser is argparse with
abbreviations on: `--api-ke`, `--ap`, `--adm`, `--api-ke=K` are read as --api-key or
--admin-api-key when no other option begins so, and a prefix several options share (`--a`) is
refused as ambiguous. A profile that spells the key any of these ways is refused at load, so the
key never sits in compose.yaml or `docker inspect` while the release's label says `api-key: none`.
The option list the rule resolves against is the pinned sglang's own (checked against its parser
here), and argparse itself, fed that list, is the oracle of the property test."""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, free_port, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deploytool.profiles.rules import KEY_FLAGS, key_flag, launch_argv_problems, parser_options
from deploytool.sim.settings import build_parser as sim_parser

CANARY = "sk-canary-3be1f0c9"
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = tuple(f"--{k}" for k in KEY_FLAGS)


def sglang_like_parser(options) -> tuple[argparse.ArgumentParser, dict[str, str]]:
    """A parser with SGLang's option strings, each its own action, as argparse would read them."""
    parser = argparse.ArgumentParser(prog="sglang serve", add_help=False)
    dests = {}
    for i, option in enumerate(sorted(options)):
        dests[option] = f"o{i}"
        parser.add_argument(option, dest=f"o{i}", nargs="?", const="SET", default=None)
    return parser, dests


PARSER, DESTS = sglang_like_parser(parser_options())


def argparse_says(parser, dests, token: str) -> str:
    """'key' when argparse reads `token` as a key flag, 'ambiguous-key' when it refuses it as
    ambiguous with a key flag among its readings, else 'other'."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed, _ = parser.parse_known_args([token, "V"])
    except SystemExit:
        message = err.getvalue().partition("error: ")[
            2
        ]  # after the usage: "ambiguous option: --a could match --x, --y"
        matches = message.rpartition("could match")[2].replace(",", " ").split()
        return "ambiguous-key" if "ambiguous option" in message and set(KEYS) & set(matches) else "other"
    return "key" if any(getattr(parsed, dests[k]) is not None for k in KEYS if k in dests) else "other"


def test_every_prefix_of_a_key_flag_is_refused_as_argparse_reads_it():
    seen = {}
    for key in KEYS:
        for end in range(3, len(key) + 1):
            for token in (key[:end], f"{key[:end]}={CANARY}"):
                said = argparse_says(PARSER, DESTS, token)
                seen[token] = said
                assert said in ("key", "ambiguous-key"), token  # the oracle: every prefix is one of these
                assert key_flag(token), token
                [(where, what)] = launch_argv_problems(["python", "-m", "sglang.launch_server", token], {})
                assert where == ("server", "command", "3") and CANARY not in what
    # real abbreviations among them: argparse itself resolves these to the key
    assert seen["--ap"] == seen["--api-ke"] == seen["--adm"] == seen["--admin"] == "key"
    assert seen["--a"] == "ambiguous-key"


option_names = st.sampled_from(sorted(parser_options()))
prefixes = st.one_of(option_names, st.sampled_from(KEYS)).flatmap(
    lambda o: st.integers(min_value=2, max_value=len(o)).map(lambda n: o[:n])
)
tokens = st.tuples(prefixes, st.one_of(st.just(""), st.text(max_size=6).map(lambda v: "=" + v))).map("".join)


@SETTINGS
@given(token=tokens)
def test_the_rule_refuses_exactly_what_argparse_reads_as_a_key(token):
    said = argparse_says(PARSER, DESTS, token)
    if said in ("key", "ambiguous-key"):  # never silently accepted as the key
        assert key_flag(token), (token, said)
        assert launch_argv_problems(["python"], {token: True}), token  # server.args: a bare flag
    else:  # a flag argparse reads as another option (or refuses for another reason) is left alone
        assert not key_flag(token), (token, said)


@SETTINGS
@given(token=tokens)
def test_what_the_reference_runtimes_parser_reads_as_its_key_is_refused_too(token):
    parser = sim_parser()
    dests = {o: a.dest for a in parser._actions for o in a.option_strings}
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parsed, _ = parser.parse_known_args([token, "V"])
    except SystemExit:
        return
    if getattr(parsed, dests.get("--api-key", "api_key"), None) is not None:
        assert key_flag(token), token


@pytest.mark.parametrize(
    "body, field, reading",
    [
        (f"server:\n  args: {{api-ke: {CANARY}}}\n", "server.args.api-ke", "reads '--api-ke' as --api-key"),
        (f"server:\n  args: {{ap: {CANARY}}}\n", "server.args.ap", "reads '--ap' as --api-key"),
        (f"server:\n  args: {{adm: {CANARY}}}\n", "server.args.adm", "reads '--adm' as --admin-api-key"),
        (
            f"server:\n  command: [/opt/venv/bin/python, -m, deploytool.sim, --api-k={CANARY}]\n",
            "server.command.3",
            "reads '--api-k' as --api-key",
        ),
        (
            f"server:\n  args: {{served-model-name: [m, --admin-a, {CANARY}]}}\n",
            "server.args.served-model-name",
            "reads '--admin-a' as --admin-api-key",
        ),
        (f"server:\n  args: {{a: {CANARY}}}\n", "server.args.a", "would refuse '--a' as ambiguous"),
    ],
)
def test_up_refuses_an_abbreviated_key_and_says_how_sglang_reads_it(tmp_path: Path, body, field, reading):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "child.yaml").write_text(f"name: child\nextends: sim\n{body}")
    for command in (
        ("up", "--cpu", "--dry-run", "--port", str(free_port())),
        ("render", "--cpu", "--image", "x:y"),
    ):
        out = run_cli(*command, "--profile", "child", "--profiles-dir", str(folder), timeout=120)
        text = " ".join(out.stderr.split())
        assert out.returncode == 2, out.stdout + out.stderr
        assert "child.yaml:" in text and field in text and reading in text, out.stderr
        assert "server.api_key: {env: NAME} or {file: PATH}" in text
        assert CANARY not in out.stdout + out.stderr  # nothing rendered, no label saying `api-key: none`


def test_an_unambiguous_abbreviation_of_another_flag_is_left_alone(tmp_path: Path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "child.yaml").write_text(
        "name: child\nextends: sim\nserver:\n  args: {api: null, admin-api-key: false}\n"
    )
    out = run_cli("render", "--cpu", "--image", "x:y", "--profile", "child", "--profiles-dir", str(folder))
    assert out.returncode == 0, out.stderr  # left out of the command line: nothing to refuse
    labels = yaml.safe_load(out.stdout)["services"]["server"]["labels"]
    assert labels["dev.deploytool.api-key"] == "none"


def test_every_pinned_sglang_has_its_option_list():
    matrix = yaml.safe_load((ROOT / "images" / "versions.yaml").read_text())
    listed = {p.stem for p in (ROOT / "images" / "sglang" / "parser-options").glob("*.txt")}
    assert set(matrix["sglang"]) <= listed
    assert {"--api-key", "--admin-api-key", "--model-path", "--fastapi-root-path"} <= parser_options()


def test_the_shipped_option_list_is_sglangs_own(sglang_parser_python: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("sglang_options", ROOT / "scripts" / "sglang_options.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    from conftest import SGLANG

    shipped = (ROOT / "images" / "sglang" / "parser-options" / f"{SGLANG}.txt").read_text().splitlines()
    assert script.options(sglang_parser_python) == [line for line in shipped if not line.startswith("#")]


def test_tune_refuses_a_key_among_the_flags_it_would_search(tmp_path: Path):
    """Every value a tune search tries lands on a candidate's command line: `tune.flags` and a
    --space file meet the same rule."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "child.yaml").write_text(f"name: child\nextends: sim\ntune:\n  flags: {{api-ke: [{CANARY}]}}\n")
    out = run_cli(
        "tune",
        "--profile",
        "child",
        "--profiles-dir",
        str(folder),
        "--dry-run",
        "--report",
        str(tmp_path / "r"),
    )
    text = " ".join(out.stderr.split())
    assert (
        out.returncode == 2 and "tune.flags.api-ke: SGLang's parser reads '--api-ke' as --api-key" in text
    ), out.stdout + out.stderr
    space = tmp_path / "space.yaml"
    space.write_text(f"flags: {{adm: [{CANARY}]}}\n")
    out = run_cli(
        "tune", "--profile", "sim", "--space", str(space), "--dry-run", "--report", str(tmp_path / "r2")
    )
    text = " ".join(out.stderr.split())
    assert out.returncode == 2 and "flags.adm: SGLang's parser reads '--adm' as --admin-api-key" in text, (
        out.stdout + out.stderr
    )
    assert CANARY not in out.stdout + out.stderr
