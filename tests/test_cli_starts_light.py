"""`deploytool --help` and the state helpers load only what they need: no Docker SDK, no
pandas, no suites. (How fast that makes a start is a figure for benchmarks/, not a test.)"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "docker", "matplotlib", "kubernetes", "deploytool.deploy", "deploytool.qualify", "deploytool.bench")


def loaded_after(statement: str) -> list[str]:
    code = f"import sys\n{statement}\nimport json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    modules = set(json.loads(out.stdout.splitlines()[-1]))
    return [m for m in HEAVY if m in modules]


def test_state_helpers_do_not_load_pandas_or_the_engine():
    assert loaded_after("import deploytool.release.state, deploytool.files") == []


def test_the_cli_loads_its_libraries_only_when_a_command_runs():
    assert loaded_after("import deploytool.cli") == []
    help_run = loaded_after("from deploytool.cli import app\n"
                            "try:\n    app(['--help'])\nexcept SystemExit:\n    pass")
    assert help_run == []
