"""A plan carries what its steps need of the profile: the executor is handed the plan, the slot
and the engine, nothing beside. The Build and Qualify steps carry the profile they read, the
new release's Start where each secret's value is read; none of it shows in `--json` or the
plan's lines, and no value is in it."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from deploy_facts import SIM, facts, release

from deploytool.deploy.executor import execute
from deploytool.deploy.plan import UpOptions, plan_up
from deploytool.deploy.step_effects import _secret_env
from deploytool.deploy.steps import Build, Qualify, Start
from deploytool.errors import DeployError
from deploytool.profiles import SecretRef

KEY = "sk-carried-3b9e1"


def _keyed(tmp_path: Path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    profile = SIM.model_copy(deep=True)
    profile.server.api_key = SecretRef(file=str(key_file))
    return profile


def test_execute_takes_no_profile_beside_the_plan() -> None:
    assert "profile" not in inspect.signature(execute).parameters


def test_the_steps_carry_the_profile_and_the_secrets_places_but_show_neither(tmp_path: Path) -> None:
    profile = _keyed(tmp_path)
    plan = plan_up(facts(release(1, "running"), current=1), profile, UpOptions())
    build = next(s for s in plan.steps if isinstance(s, Build))
    qualify = next(s for s in plan.steps if isinstance(s, Qualify))
    start = next(s for s in plan.steps if isinstance(s, Start) and s.new)
    assert build.spec is profile and qualify.spec is profile
    assert [s.name for s in start.sources] == start.secrets == ["sglang_config", "auth_header"]
    assert all(s.ref.file == str(tmp_path / "key") for s in start.sources)
    shown = json.dumps(plan.to_json())
    assert '"spec"' not in shown and '"sources"' not in shown and '"not_on_cards"' not in shown
    assert KEY not in shown and KEY not in repr(plan) and KEY not in "\n".join(plan.lines())
    # a restore's start of a stopped release reads no secret: its container has them
    assert all(not s.sources for s in plan.restore if isinstance(s, Start))


def test_the_start_reads_each_secret_from_where_its_step_says(tmp_path: Path) -> None:
    plan = plan_up(facts(release(1, "running"), current=1), _keyed(tmp_path), UpOptions(skip_qualify=True))
    start = next(s for s in plan.steps if isinstance(s, Start) and s.new)
    env = _secret_env(start)
    assert env is not None and set(env) == {
        "DEPLOYTOOL_SECRET_SGLANG_CONFIG",
        "DEPLOYTOOL_SECRET_AUTH_HEADER",
    }
    assert json.loads(env["DEPLOYTOOL_SECRET_SGLANG_CONFIG"]) == {"api-key": KEY}
    assert env["DEPLOYTOOL_SECRET_AUTH_HEADER"] == f"Authorization: Bearer {KEY}\n"
    # a hand-made step that names secrets without saying where they are read is refused, not started bare
    with pytest.raises(DeployError, match="does not say where its secrets are read"):
        _secret_env(
            Start(release=2, project="p", new=True, bind="127.0.0.1", port=1, secrets=["sglang_config"])
        )


def test_a_cpu_image_on_a_card_is_planned_and_said_for_up_to_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    from deploytool.deploy import up_checks

    assert (
        plan_up(facts(release(1, "running"), current=1), SIM, UpOptions(skip_qualify=True)).not_on_cards
        is None
    )
    reason = "profile sim builds a CPU image (image.cuda: null): a real `up` refuses it"
    monkeypatch.setattr(up_checks, "cpu_image_on_cards", lambda slot, profile: reason)
    plan = plan_up(facts(release(1, "running"), current=1), SIM, UpOptions(skip_qualify=True))
    # planned and warned (a dry run shows it); the plan says it, so `up` refuses with no profile at hand
    assert plan.not_on_cards == reason and plan.warnings.count(reason) == 1
    assert "not_on_cards" not in plan.to_json()
