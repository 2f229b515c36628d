"""One health budget: the figure the plan prints is the one that ends `up`'s wait, the moment the
engine's own health check can first count the container unhealthy (start_period, then `retries`
failed checks `interval` apart), counted from the container's start as the engine counts it; and
the error says how long it waited and which profile field gives a slow start more time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lifecycle_helpers import PROFILES, release_row, slot_status, up

from deploytool.profiles import load_profile
from deploytool.profiles.schema import HealthSpec

# Loads far longer than its health check allows: start_period 2 s, then 3 checks 1 s apart.
SLOW = (
    "name: t-loads-long\nextends: t-good\nserver:\n  args:\n    load-seconds: 120\n"
    "health: {start_period: 2, start_interval: 1, interval: 1, timeout: 1, retries: 3}\n"
)
BUDGET_S = 2 + (3 - 1) * 1


def test_the_budget_is_when_the_engines_check_first_gives_up() -> None:
    health = HealthSpec(start_period=60, start_interval=1, interval=5, timeout=5, retries=3)
    assert health.budget_seconds() == 70  # the sim profile: 90 planned, 75 real before
    assert health.budget_rule() == "health.start_period 60 s + (health.retries 3 - 1) x health.interval 5 s"
    assert load_profile("sim").health.budget_seconds() == 70
    card = load_profile("h200-qwen3.6-35b-a3b-fp8").health
    assert (card.start_period, card.interval, card.retries) == (1200, 10, 3)
    assert card.budget_seconds() == 1220  # not 1,305: the engine gives up at about 1,220 s


@pytest.fixture
def profiles_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "t-good.yaml").write_text(PROFILES["t-good"])
    (folder / "t-loads-long.yaml").write_text(SLOW)
    return folder


def test_up_ends_its_wait_at_the_planned_budget_and_names_the_field(slot_env, docker_engine) -> None:
    plan = slot_env("up", "--cpu", "--profile", "t-loads-long", "--skip-qualify", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    wanted = (
        f"wait until release 1 is healthy (/health, budget {BUDGET_S} s = health.start_period 2 s + "
        "(health.retries 3 - 1) x health.interval 1 s)"
    )
    assert wanted in plan.stdout, plan.stdout

    failed = up(slot_env, "t-loads-long")
    assert failed.returncode == 1, failed.stderr
    assert f"within its health budget of {BUDGET_S} s = health.start_period 2 s" in failed.stderr, (
        failed.stderr
    )
    assert "raise health.start_period in profile t-loads-long" in failed.stderr
    waited = float(re.search(r"waited (\d+\.\d) s since its container started", failed.stderr).group(1))
    # not before the budget, and not much after it: the wait polls every fifth of a second and the
    # engine's own check ends in the same second (generous for a loaded machine)
    assert BUDGET_S <= waited < BUDGET_S + 5, failed.stderr
    assert release_row(slot_status(), 1)["state"] == "exited"  # stopped, kept for inspection
