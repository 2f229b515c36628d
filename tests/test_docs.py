"""The docs describe the code that ships: the CLI reference is generated from the typer app,
and the README starts with the two commands that set everything up."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]


def test_cli_reference_is_current():
    generated = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    committed = (ROOT / "docs" / "cli.md").read_text()
    assert generated == committed, "docs/cli.md is stale: run `make docs`"


def test_profile_field_reference_is_current():
    generated = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_profile_docs.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    committed = (ROOT / "docs" / "profile-fields.md").read_text()
    assert generated == committed, "docs/profile-fields.md is stale: run `make docs`"
    assert "](profile-fields.md)" in (ROOT / "docs" / "profiles.md").read_text()


def test_every_profile_field_has_a_description():
    from pydantic import BaseModel

    from deploytool.profiles import Profile

    seen: set[type] = set()
    missing: list[str] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        seen.add(model)
        for name, field in model.model_fields.items():
            if not (field.description or "").strip():
                missing.append(f"{prefix}{name}")
            for arg in (field.annotation, *getattr(field.annotation, "__args__", ())):
                for inner in (arg, *getattr(arg, "__args__", ())):
                    if isinstance(inner, type) and issubclass(inner, BaseModel) and inner not in seen:
                        walk(inner, f"{prefix}{name}.")

    walk(Profile, "")
    assert len(seen) >= 10, seen  # the walk reached the nested sections, not just the top
    assert not missing, f"profile fields without a description in the schema: {missing}"


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^(make \w+)", readme.split("```", 2)[1], re.M)
    assert commands[:2] == ["make demo", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_doc_the_readme_links_exists():
    readme = (ROOT / "README.md").read_text()
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).exists(), link


def test_compose_example_is_what_render_prints_today():
    doc = (ROOT / "docs" / "compose.md").read_text()
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    done = run_cli(
        "render",
        "--gpu",
        "GPU-698e6783-c3a1-e93d-9440-6334680c7c1f",
        "--profile",
        "h200-qwen3.6-35b-a3b-fp8",
        "--image",
        "deploytool/sglang:h200-qwen3.6-35b-a3b-fp8-0123456789ab",
        # names as a user sees them; the hub cache where the doc's command puts it
        env={"DEPLOYTOOL_INSTANCE": "default", "DEPLOYTOOL_HF_HOME": "/srv/huggingface"},
    )
    assert done.returncode == 0, done.stderr
    rendered = done.stdout
    assert example == rendered, "docs/compose.md's example is stale: re-render it with the command it shows"
