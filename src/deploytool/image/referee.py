"""SGLang's own serving code as the referee of deploytool's reference runtime.

The conformance tests (tests/test_sim_conformance*.py) do not imitate sglang: they run the
pinned sglang's protocol models (sglang/srt/entrypoints/openai/protocol.py), its
FunctionCallParser (sglang/srt/function_call/function_call_parser.py) and its ReasoningParser
(sglang/srt/parser/reasoning_parser.py) on what the sim serves. Those need a few packages more
than the argument parser, so the environment is deploytool's parser venv
(deploytool.image.parser_env.parser_venv, made once per sglang release and Python) extended in place
with images/sglang/conformance-requirements.txt. Its own stamp (venv/conformance.json) lives
inside the venv folder, so a rebuilt parser venv (clear=True) drops it and it is made again;
the parser venv's stamp (complete.json) is untouched, so `profiles check` keeps working.

deploytool's own venv has no sglang: callers run `referee_python()` in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from filelock import FileLock

from ..errors import DeploytoolError
from ..resources import resource
from .cache_venv import compile_by_importing, pip_install
from .parser_env import parser_venv


def conformance_requirements() -> tuple[list[str], list[str]]:
    """(with dependencies, without dependencies) from conformance-requirements.txt."""
    with_deps, no_deps = [], []
    for line in resource("images", "sglang", "conformance-requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("--no-deps "):
            no_deps.append(line.removeprefix("--no-deps ").strip())
        else:
            with_deps.append(line)
    return with_deps, no_deps


def referee_python(sglang_version: str = "0.5.23") -> Path:
    """The python of an environment where sglang's protocol models and parsers import.
    Made once (a few minutes, needs a package index once); later calls only read the stamp."""
    python = parser_venv(sglang_version)
    venv_dir = python.parent.parent
    stamp = venv_dir / "conformance.json"
    with_deps, no_deps = conformance_requirements()
    wanted = {"with_deps": with_deps, "no_deps": no_deps}
    with FileLock(str(venv_dir.parent / "conformance.lock")):  # one builder at a time
        if stamp.exists() and json.loads(stamp.read_text()) == wanted:
            return python
        for step in (with_deps, ["--no-deps", *no_deps]):
            if not [s for s in step if s != "--no-deps"]:
                continue
            proc = pip_install(python, step)
            if proc.returncode != 0:
                raise DeploytoolError(
                    f"could not add sglang's serving packages to {venv_dir}:\n"
                    + "\n".join("    " + x for x in proc.stderr.strip().splitlines()[-10:]),
                    hint="it needs a package index once (images/sglang/conformance-requirements.txt)",
                )
        compile_by_importing(
            python,
            [
                "sglang.srt.entrypoints.openai.protocol",
                "sglang.srt.function_call.function_call_parser",
                "sglang.srt.parser.reasoning_parser",
            ],
        )
        stamp.write_text(json.dumps(wanted))
    return python


def run_referee(
    script: str,
    payload: object,
    *,
    sglang_version: str = "0.5.23",
    timeout: float = 300,
    python: Path | None = None,
) -> object:
    """Run `script` (python source reading one JSON document on stdin and printing one on the
    last line of stdout) with the referee environment's python (`python`, when the caller has
    already made it)."""
    python = python or referee_python(sglang_version)
    proc = subprocess.run(
        [str(python), "-c", script],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise DeploytoolError(
            f"sglang's referee code failed (exit {proc.returncode}):\n"
            + "\n".join("    " + x for x in (proc.stderr or proc.stdout).strip().splitlines()[-15:])
        )
    return json.loads(lines[-1])
