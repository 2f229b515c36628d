"""The entrypoint of a release's CPU twin (deploytool.deploy.cpu_twin): runs in the release's
image, as `python3 -c <this file>`, with the release's own command line as its arguments
(compose passes `command:` after `entrypoint:`). Standard library and sglang only.

It does what `python -m sglang.launch_server` does first, with the same arguments, the same
environment and the same mounts as the release: sglang's own prepare_server_args() parses the
command line (an unknown flag exits 2 with argparse's message, as the release would). Then it
reports what that sglang stored for each flag given, where the weights' config.json is found
through the release's mounts (the hub cache at the pinned revision, or the model folder), what
SGLang's own model configuration (ModelConfig.from_server_args) refuses with it, and how far sglang's own argument resolution (ServerArgs.resolve_once: the model's config, the
device) gets on this CPU: a CPU image carries sglang's parser only, so it stops at the first
serving package it lacks; a GPU image stops at the device.

The answer is one JSON line after the marker line on stdout; sglang's logging goes to stderr.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
from typing import Any

MARKER = "---deploytool-cpu-twin---"
LAUNCHER = ["-m", "sglang.launch_server"]


def _jsonable(value: object) -> object:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _hub_cache() -> str:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return os.path.join(home, "hub")


def _model(server_args: Any) -> dict[str, Any]:
    """Where the release's runtime finds the weights' config.json (a folder, or the hub cache's
    snapshot at the pinned revision: the release runs with HF_HUB_OFFLINE=1), and what it says."""
    path, revision = server_args.model_path, getattr(server_args, "revision", None)
    if os.path.isdir(path):
        config = os.path.join(path, "config.json")
    else:
        repo = os.path.join(_hub_cache(), "models--" + path.replace("/", "--"))
        commit = revision or "main"
        if not re.fullmatch(r"[0-9a-f]{40}", commit):
            ref = os.path.join(repo, "refs", commit)
            if os.path.isfile(ref):
                with open(ref) as handle:
                    commit = handle.read().strip()
        config = os.path.join(repo, "snapshots", commit, "config.json")
    found: dict[str, Any] = {
        "model_path": path,
        "revision": revision,
        "config": config,
        "found": os.path.isfile(config),
    }
    if found["found"]:
        with open(config) as handle:
            data = json.load(handle)
        found.update(model_type=data.get("model_type"), architectures=data.get("architectures"))
    return found


def _model_config(server_args: Any, model: dict[str, Any]) -> dict[str, Any]:
    """SGLang's own model configuration from the release's arguments and config.json, as its start
    builds it (ModelConfig.from_server_args: the derived context length and what it refuses),
    where the config is found and SGLang's config classes import."""
    if not model.get("found"):
        return {"ok": None, "refused": None, "note": "no config.json where the release would read it"}
    try:
        from sglang.srt.configs.model_config import ModelConfig
    except Exception as exc:
        return {
            "ok": None,
            "refused": None,
            "note": f"SGLang's model configuration does not import here "
            f"({type(exc).__name__}: {str(exc)[:200]})",
        }
    try:
        config = ModelConfig.from_server_args(server_args)
    except Exception as exc:
        return {"ok": False, "refused": f"{type(exc).__name__}: {exc}", "note": None}
    return {"ok": True, "refused": None, "note": None, "context_len": getattr(config, "context_len", None)}


def _resolution(server_args: Any) -> dict[str, Any]:
    resolve = getattr(server_args, "resolve_once", None)
    if resolve is None:
        return {"ok": None, "stopped_at": "this sglang resolves its arguments while parsing them"}
    try:
        resolve()
    except BaseException as exc:
        return {"ok": False, "stopped_at": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "stopped_at": None}


def main(command: list[str]) -> int:
    """`command`: the release's, e.g. python3 -m sglang.launch_server --model-path ..."""
    if command[1:3] != LAUNCHER:
        print(MARKER)
        print(
            json.dumps(
                {
                    "error": "the release's command does not run python -m sglang.launch_server: "
                    + " ".join(command[:3])
                }
            )
        )
        return 3
    args = command[3:]
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(args)  # SystemExit(2), usage on stderr, for a flag it does not know
    import sglang

    given = [a[2:].split("=", 1)[0] for a in args if a.startswith("--")]
    stored = {
        f"--{flag}": _jsonable(getattr(server_args, flag.replace("-", "_"), "<not a field>"))
        for flag in given
    }
    report: dict[str, Any] = {
        "sglang": importlib.metadata.version("sglang"),
        "sglang_module": os.path.dirname(sglang.__file__),
        "server_args": stored,
        "model": _model(server_args),
    }
    report["model_config"] = _model_config(server_args, report["model"])
    report["resolution"] = _resolution(server_args)
    print(MARKER)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))  # sys.argv[0] is '-c'
