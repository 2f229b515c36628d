"""The parser environment: deploytool's own virtual environment with a pinned sglang's argument
parser, where `profiles check` runs the probe when no built image holds that sglang (see
flagcheck). Made once per sglang release and Python under the cache folder: the sglang wheel
without its dependencies, the few light packages its parser imports
(images/sglang/parser-requirements.txt) and torch, from the index DEPLOYTOOL_TORCH_INDEX_URL
names; said before the cost is paid, and reused while its requirements stay the same.
"""

from __future__ import annotations

import json
import os
import sys
import venv
from pathlib import Path

from filelock import FileLock

from ..errors import CouldNotRun, UsageError
from ..release.state import cache_dir
from ..resources import resource
from .cache_venv import compile_by_importing, pip_install
from .patches import sglang_wheel
from .versions import load_matrix

TORCH_INDEX_ENV = "DEPLOYTOOL_TORCH_INDEX_URL"


def parser_requirements(torch_version: str) -> list[str]:
    lines = (resource("images", "sglang", "parser-requirements.txt")).read_text().splitlines()
    pins = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return [f"torch=={torch_version}", *pins]


def _say(line: str) -> None:
    # stderr, flushed at once: said before the cost is paid, whatever stdout is piped into
    print(line, file=sys.stderr, flush=True)


def first_run_notice(
    sglang_version: str, root: Path, requirements: list[str], torch_index: str | None
) -> list[str]:
    """What making the parser environment costs, said before it starts (measured on this
    project's 2-core machine: 38 s and about 2.3 GB, torch's CPU build and triton most of it)."""
    lines = [
        f"deploytool: making the sglang {sglang_version} parser environment once, in {root}: the sglang wheel "
        f"(about 40 MB) without its dependencies, {requirements[0]} and {len(requirements) - 1} light packages; "
        "about 2.3 GB on disk and about a minute (38 s measured on 2 cores) with a CPU torch; later checks "
        "reuse it and take a few seconds"
    ]
    if torch_index is None:
        lines.append(
            f"deploytool: {TORCH_INDEX_ENV} is not set: {requirements[0]} comes from pip's configured "
            "index, which on x86_64 may give the CUDA build (several GB of nvidia wheels, many minutes); "
            f"set {TORCH_INDEX_ENV} to a CPU torch index to get the CPU build, or build the profile's "
            "image first (`profiles check` then runs in it)"
        )
    return lines


def parser_venv(sglang_version: str) -> Path:
    """deploytool's own environment with sglang's parser: made once, reused."""
    matrix = load_matrix()
    row = matrix.sglang_row(sglang_version)
    if row is None:
        raise UsageError(f"sglang {sglang_version} is not in the version matrix ({matrix.source})")
    if not row.cpu_torch:
        raise UsageError(
            f"the version matrix names no CPU torch for sglang {sglang_version} (cpu_validation.torch)"
        )
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    root = cache_dir("flagcheck", f"sglang-{sglang_version}-py{python}")
    bin_python = root / "venv" / "bin" / "python"
    requirements = parser_requirements(row.cpu_torch[0])
    torch_index = os.environ.get(TORCH_INDEX_ENV) or None
    stamp = root / "complete.json"
    # Two deploytools (or test sessions) making the same venv at once clear each other's files:
    # the second waits, then finds the stamp.
    with FileLock(str(root / "build.lock")):
        return _make_parser_venv(sglang_version, root, bin_python, stamp, requirements, torch_index, python)


def _make_parser_venv(
    sglang_version: str,
    root: Path,
    bin_python: Path,
    stamp: Path,
    requirements: list[str],
    torch_index: str | None,
    python: str,
) -> Path:
    if bin_python.exists() and stamp.exists():
        made = json.loads(stamp.read_text())
        if made.get("requirements") == requirements and made.get("torch_index") == torch_index:
            return bin_python
    for line in first_run_notice(sglang_version, root, requirements, torch_index):
        _say(line)
    wheel = sglang_wheel(sglang_version, python)
    venv.EnvBuilder(with_pip=True, clear=True).create(root / "venv")
    torch_step = [*(["--index-url", torch_index] if torch_index else []), requirements[0]]
    steps = (
        (f"the sglang {sglang_version} wheel, without its dependencies", ["--no-deps", str(wheel)]),
        (f"{requirements[0]} (the largest part)", torch_step),
        (f"the parser's {len(requirements) - 1} light packages", requirements[1:]),
    )
    for number, (what, step) in enumerate(steps, 1):
        _say(f"deploytool: [{number}/{len(steps)}] installing {what}")
        proc = pip_install(bin_python, step)
        if proc.returncode != 0:
            raise CouldNotRun(
                f"could not make the sglang {sglang_version} parser environment in {root}:\n"
                + "\n".join("    " + x for x in proc.stderr.strip().splitlines()[-10:]),
                hint="it needs a package index once (or pip's find-links); a built image avoids it",
            )
    compile_by_importing(
        bin_python, ["sglang.srt.server_args", "sglang.srt.configs.model_config"]
    )  # what the probe imports
    stamp.write_text(
        json.dumps({"requirements": requirements, "wheel": wheel.name, "torch_index": torch_index})
    )
    return bin_python
