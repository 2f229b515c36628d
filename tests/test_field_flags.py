"""The library names request fields, the CLI names flags: every field a library module raises a
FieldError for is in cli/flags.py's table, every flag there is an option of some command, and the
CLI prints the flag (in words and in --json) where the library said the field."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import typer.main

from deploytool import errors
from deploytool.cli import app, main
from deploytool.cli.flags import FLAG_OF_FIELD, flag_message
from deploytool.errors import FieldError

SRC = Path(__file__).resolve().parents[1] / "src" / "deploytool"


# FieldError and its kinds (a FieldSentenceError words the same field without the colon)
_FIELD_ERRORS = {
    name for name, kind in vars(errors).items() if isinstance(kind, type) and issubclass(kind, FieldError)
}


def _fields_raised() -> dict[str, str]:
    """field -> where, for every FieldError("field", ...) written in the library."""
    found = {}
    for path in SRC.rglob("*.py"):
        if "cli" in path.relative_to(SRC).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", getattr(node.func, "attr", None)) in _FIELD_ERRORS
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found[node.args[0].value] = f"{path.relative_to(SRC)}:{node.lineno}"
    return found


def _every_option() -> set[str]:
    command = typer.main.get_command(app)
    options: set[str] = set()
    stack = [command]
    while stack:
        current = stack.pop()
        options.update(opt for param in current.params for opt in getattr(param, "opts", []))
        stack.extend(getattr(current, "commands", {}).values())
    return options


def test_every_field_the_library_raises_has_its_flag() -> None:
    # a dotted field is a profile's (qualify.preflight.expect.min_accept_length): no flag sets it,
    # and its path is what a person looks for in the file
    missing = {
        field: where
        for field, where in _fields_raised().items()
        if field not in FLAG_OF_FIELD and "." not in field
    }
    assert not missing, f"add these fields to cli/flags.py FLAG_OF_FIELD: {missing}"


def test_every_flag_in_the_table_is_an_option_of_a_command() -> None:
    unknown = set(FLAG_OF_FIELD.values()) - _every_option()
    assert not unknown, f"no command has these options: {sorted(unknown)}"


def test_the_message_names_the_flag_for_a_person_and_the_field_for_a_library_caller(monkeypatch) -> None:
    monkeypatch.setitem(FLAG_OF_FIELD, "retention", "--retention")
    error = FieldError("retention", "keep at least 1 stopped release", value="0")
    assert str(error) == "retention 0: keep at least 1 stopped release"
    assert flag_message(error) == "--retention 0: keep at least 1 stopped release"
    # a field no flag sets (a value from a profile or a file) keeps its own name
    bare = FieldError("threshold", "expected a share below 1", value=None)
    assert flag_message(bare) == "threshold: expected a share below 1"


def test_the_cli_prints_the_flag_in_words_and_in_json(monkeypatch, capsys) -> None:
    """main's error handling, given the FieldError a command's library call raised: stderr and
    --json's error say the flag, and the exit code is a usage error's."""
    import deploytool.cli as cli

    monkeypatch.setitem(FLAG_OF_FIELD, "samples", "--samples")

    def command_that_refuses(**_kwargs: object) -> None:
        raise FieldError("samples", "expected 1 or more", value="0")

    monkeypatch.setattr(cli, "app", command_that_refuses)
    for args in (["probe"], ["probe", "--json"]):
        try:
            main(args)
        except SystemExit as exit_:
            assert exit_.code == 2
        else:
            raise AssertionError("main returned after a FieldError")
    out, err = capsys.readouterr()
    assert err.count("--samples 0: expected 1 or more") == 2
    assert "samples 0:" not in err.replace("--samples 0:", "")
    error = json.loads(out)["error"]
    assert error["message"] == "--samples 0: expected 1 or more"
    # the kind a bad value always had, and the option beside it
    assert (error["kind"], error["flag"]) == ("UsageError", "--samples")


def test_error_text_is_printed_as_written_not_as_emoji(monkeypatch, capsys) -> None:
    """rich turns ":two:" into an emoji unless told not to: a value such as `h200:two:` must reach
    the terminal as typed."""
    import deploytool.cli as cli
    from deploytool.errors import UsageError

    def command_that_refuses(**_kwargs: object) -> None:
        raise UsageError("--card h200:two:three: expected NAME:COUNT", hint="e.g. :two: cards")

    monkeypatch.setattr(cli, "app", command_that_refuses)
    try:
        main(["probe"])
    except SystemExit as exit_:
        assert exit_.code == 2
    err = capsys.readouterr().err
    assert "h200:two:three" in err and "e.g. :two: cards" in err


def _first_text(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    if isinstance(node, ast.BinOp):
        return _first_text(node.left)
    return ""


def test_no_library_error_begins_with_an_option() -> None:
    """The library words a refusal by the field it holds; the flag in front is the CLI's to add
    (flag_message). A message that begins with `--name` speaks CLI from below it."""
    found = []
    for path in SRC.rglob("*.py"):
        if "cli" in path.relative_to(SRC).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            if _first_text(node.exc.args[0]).startswith("--"):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not found, f"raise a FieldError naming the field instead: {found}"
