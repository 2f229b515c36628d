"""Runs where sglang is installed (the built image, or deploytool's parser venv), never in
deploytool's own process: standard library and sglang only.

Given the launch flags of a profile, as groups [flag, value...], it asks sglang's own parser
(sglang.srt.server_args) about each flag alone, so every bad flag is named, not only the
first one argparse stops at; then parses the whole command line with prepare_server_args()
exactly as `python -m sglang.launch_server` does and compares what sglang stored with what
was given; and, when asked and possible, resolves the arguments (the model's config must be
readable there) and reports the values sglang derives.

    python flagprobe.py '{"groups": [["--tp-size", "8"], ...], "names_only": [["--enable-x", false]], "resolve": false}'
    python flagprobe.py '[{...}, {...}]'    (several profiles: an answer each, in order)

`names_only` are the flags whose value (false or null) keeps them off the command line: only
their names are checked, so a misspelt one is still reported as unknown.

Each answer is one JSON line after a marker line on stdout; sglang's logging goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import re
import sys
from typing import Any

MARKER = "---deploytool-flagprobe---"


def _parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve", add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    """(namespace or None, argparse's error text)."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv), ""
    except SystemExit:
        lines = [x for x in err.getvalue().strip().splitlines() if x.strip()]
        return None, (lines[-1] if lines else "rejected")


def _classify(message: str) -> tuple[str, str]:
    text = message.split("error:", 1)[-1].strip()
    if "unrecognized arguments" in text:
        return "unknown", text
    if "invalid choice" in text:
        return "invalid_choice", text
    if re.search(r"invalid \S+ value", text):
        return "wrong_type", text
    if "expected" in text and "argument" in text:
        return "wrong_arity", text
    return "rejected", text


def _plain(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


def _installed_version() -> str | None:
    """The version of the sglang installed where the parser runs: in an image built from a fork,
    the fork's own (its metadata), not the release the profile names."""
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return None


def _unknown(flag: str, given: object, actions: dict[str, argparse.Action]) -> dict[str, Any]:
    close = difflib.get_close_matches(flag, [o for o in actions if o.startswith("--")], n=3, cutoff=0.75)
    return {
        "flag": flag,
        "given": given,
        "status": "unknown",
        "message": f"sglang has no flag {flag}" + (f"; did you mean {', '.join(close)}?" if close else ""),
        "suggestions": close,
    }


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """One profile's answer (a JSON-able dict)."""
    groups = request["groups"]
    parser = _parser()
    actions: dict[str, argparse.Action] = {}
    for action in parser._actions:
        for option in action.option_strings:
            actions[option] = action
    findings = _findings(parser, actions, request)
    out: dict[str, Any] = {
        "findings": findings,
        "parser_error": None,
        "resolved": None,
        "resolve_error": None,
        "derived": {},
        "sglang_version": _installed_version(),
    }
    argv = [token for group in groups for token in group]
    if any(f["status"] != "ok" for f in findings):
        return out
    server_args, refusal = _server_args(argv)
    if refusal is not None:
        out["parser_error"] = refusal
        return out
    for finding in findings:
        stored = _plain(getattr(server_args, finding["dest"], None))
        finding["stored"] = stored
        if stored != finding.get("parsed"):
            finding["status"] = "overridden"
            finding["message"] = (
                f"sglang stores {stored!r} for {finding['flag']} (given {finding['given']!r})"
            )
        elif stored == finding.get("default") and finding["flag"] != "--model-path":
            finding["status"] = "redundant"
            finding["message"] = "the value is sglang's default"

    if request.get("checkpoint_files"):
        out["startup"] = startup(request, argv)
    if request.get("resolve"):
        _resolve(parser, server_args, findings, out)
    return out


def _server_args(argv: list[str]) -> tuple[Any, str | None]:
    """(SGLang's ServerArgs for argv, None), or (None, its refusal): the parser's last line on
    stderr when it exits, or what a validator in ServerArgs raised, as SGLang says it."""
    from sglang.srt.server_args import prepare_server_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return prepare_server_args(argv), None
    except SystemExit:
        return None, (err.getvalue().strip().splitlines() or ["rejected"])[-1]
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _findings(
    parser: argparse.ArgumentParser, actions: dict[str, argparse.Action], request: dict[str, Any]
) -> list[dict[str, Any]]:
    """Each flag group of the command line parsed alone (unknown, refused, or its parsed value
    beside the default), then the names left off the command line that sglang does not know."""
    base = ["--model-path", request.get("model_path") or "dummy"]
    findings: list[dict[str, Any]] = []
    for group in request["groups"]:
        flag, values = group[0], group[1:]
        finding: dict[str, Any] = {
            "flag": flag,
            "given": values if len(values) != 1 else values[0],
            "status": "ok",
            "message": "",
        }
        action = actions.get(flag)
        if action is None:
            findings.append(_unknown(flag, finding["given"], actions))
            continue
        finding["dest"] = action.dest
        namespace, error = _parse(parser, (base if flag != "--model-path" else []) + [flag, *values])
        if namespace is None:
            finding["status"], finding["message"] = _classify(error)
            if action.choices and finding["status"] == "invalid_choice":
                finding["choices"] = [str(c) for c in action.choices]
        else:
            finding["parsed"] = _plain(getattr(namespace, action.dest, None))
            finding["default"] = _plain(action.default)
        findings.append(finding)
    for flag, given in request.get("names_only") or []:  # left off the command line: the name only
        if flag not in actions:
            finding = _unknown(flag, given, actions)
            finding["message"] += f" (given {json.dumps(given)}, so left off the command line)"
            findings.append(finding)
    return findings


def _resolve(
    parser: argparse.ArgumentParser, server_args: Any, findings: list[dict[str, Any]], out: dict[str, Any]
) -> None:
    """sglang's own resolution of the arguments (best effort): what it derives, and each flag it
    resolves to something other than what was given."""
    try:
        before: dict[str, object] = {}
        for action in parser._actions:
            if action.dest and action.dest != "help":
                before[action.dest] = _plain(getattr(server_args, action.dest, None))
        server_args.resolve_once()
        resolved = {k: _plain(v) for k, v in server_args.resolved_dict().items()}
        out["derived"] = {
            k: {"before": before.get(k), "after": v}
            for k, v in resolved.items()
            if k in before and before.get(k) != v
        }
        for finding in findings:
            after = resolved.get(finding.get("dest"))
            if finding.get("dest") in out["derived"]:
                finding["status"] = "overridden"
                finding["message"] = (
                    f"sglang resolves {finding['flag']} to {after!r} (given {finding['given']!r})"
                )
        out["resolved"] = True
    except BaseException as exc:
        out["resolve_error"] = f"{type(exc).__name__}: {str(exc)[:400]}"


def startup(request: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """SGLang's own start-up checks that need no card: the server arguments built with the
    checkpoint's config.json in place of the model (as `sglang serve` builds them), then its model
    configuration (ModelConfig.from_server_args: the derived context length, the architecture,
    the quantization). What SGLang raises is its refusal; what it logs at WARNING while doing so,
    what it changes. The profile's SGLANG_* environment is set for the checks, then restored."""
    import logging
    import os
    import shutil
    import tempfile

    out: dict[str, Any] = {"refused": None, "where": None, "said": [], "context_len": None, "note": None}
    folder = tempfile.mkdtemp(prefix="deploytool-checkpoint-")
    for name, text in request["checkpoint_files"].items():
        with open(os.path.join(folder, os.path.basename(name)), "w") as f:
            f.write(text)
    args = list(argv)
    if "--model-path" in args:
        args[args.index("--model-path") + 1] = folder
    else:
        args = ["--model-path", folder, *args]
    saved = {k: os.environ.get(k) for k in request.get("env") or {}}
    os.environ.update({k: str(v) for k, v in (request.get("env") or {}).items()})
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage()[:600])

    keep = Keep(level=logging.WARNING)
    logging.getLogger().addHandler(keep)
    try:
        try:
            from sglang.srt.configs.model_config import ModelConfig
        except Exception as exc:
            out["note"] = (
                f"SGLang's model configuration does not import here ({type(exc).__name__}: {str(exc)[:200]}); "
                "the image's own SGLang runs it"
            )
            return out
        server_args, refusal = _server_args(args)
        if refusal is not None:
            out["refused"], out["where"] = refusal, "ServerArgs"
            return out
        try:
            config = ModelConfig.from_server_args(server_args)
            out["context_len"] = getattr(config, "context_len", None)
        except Exception as exc:
            out["refused"], out["where"] = f"{type(exc).__name__}: {exc}", "ModelConfig.from_server_args"
        return out
    finally:
        logging.getLogger().removeHandler(keep)
        out["said"] = said
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(folder, ignore_errors=True)


def answer_each(requests: list[dict[str, Any]]) -> None:
    """An answer each, in order, from one start-up of sglang (the import is most of the cost).
    A request that breaks the probe itself gets a probe_error, and the rest are still answered;
    sglang that does not import fails the whole run, with no answer: the environment is broken,
    not any profile's flags."""
    _parser()
    for request in requests:
        try:
            out = answer(request)
        except Exception as exc:
            out = {
                "findings": [],
                "parser_error": None,
                "resolved": None,
                "resolve_error": None,
                "derived": {},
                "sglang_version": _installed_version(),
                "probe_error": f"{type(exc).__name__}: {exc}",
            }
        line = json.dumps(out)  # before the marker: a marker is always followed by its answer
        print(MARKER)
        print(line, flush=True)


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    answer_each(request if isinstance(request, list) else [request])
