"""Write docs/cli.md from the typer app itself, so the reference cannot drift from the code.
tests/test_docs.py fails when the committed file differs from what this prints."""

from __future__ import annotations

import typer.main

from deploytool.cli import app


def describe(command, path: list[str], out: list[str]) -> None:
    name = " ".join(path)
    if getattr(command, "commands", None):  # a group (typer ships its own click)
        for sub_name in sorted(command.commands):
            describe(command.commands[sub_name], [*path, sub_name], out)
        return
    ctx = (
        type(command).context_class(command, info_name=name)
        if hasattr(type(command), "context_class")
        else None
    )
    out.append(f"## `{name}`\n")
    out.append((command.help or "").strip() + "\n")
    out.append("```\n" + command.get_usage(ctx).replace("Usage: ", "") + "\n```\n")
    rows = []
    for param in command.params:
        if param.param_type_name == "argument":
            rows.append((f"`{param.name.upper()}`", (getattr(param, "help", None) or "argument"), ""))
        elif param.param_type_name == "option" and param.name != "help":
            flags = ", ".join(f"`{o}`" for o in param.opts)
            default = (
                ""
                if param.default in (None, False, [], ()) or (param.is_flag and not param.default)
                else f" (default: {param.default})"
            )
            rows.append((flags, (param.help or "") + default, ""))
    if rows:
        out.append("| option | meaning |\n| --- | --- |")
        out.extend(f"| {flag} | {meaning.replace('|', '/')} |" for flag, meaning, _ in rows)
        out.append("")


def main() -> None:
    root = typer.main.get_command(app)
    out = [
        "# deploytool command reference\n",
        "Generated from the code by `make docs` (scripts/gen_cli_docs.py); tests/test_docs.py keeps it current.\n",
        "Exit codes shared by every command: 0 ok, 1 the command ran and said no (a gate failed, a release "
        "never became healthy), 2 bad input (usage), 3 no Docker engine, 4 no NVIDIA driver, 5 the slot is "
        "busy, 6 could not run (an endpoint unreachable, nothing measured, a tool it needs failed), "
        "7 inconclusive (tune: its budget ran out before the search could decide), "
        "130 interrupted (Ctrl-C), 143 terminated (SIGTERM: a `kill`, a batch scheduler's time limit), "
        "which cleans up as Ctrl-C does (a tune candidate or a half-started release stopped).\n",
    ]
    own = [p for p in root.params if p.param_type_name == "option" and p.name != "help"]
    if own:  # the options of `deploytool` itself, before any command (--version)
        out.append(
            "Options of `deploytool` itself, before any command: "
            + "; ".join(f"`{', '.join(p.opts)}`: {p.help}" for p in own)
            + "\n"
        )
    describe(root, ["deploytool"], out)
    print("\n".join(out).rstrip() + "\n")


if __name__ == "__main__":
    main()
