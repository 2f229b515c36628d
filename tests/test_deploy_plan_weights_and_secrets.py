"""The weights and secrets checks in the plan phase, without Docker: the weights checked and the
secrets' places ride in the facts (values dropped), a missing checkpoint or an unset secret is
refused by plan_up before any step, and the plan says where each secret goes, never a value."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from fake_checkpoints import write_model_folder

from deploytool.deploy.facts import Facts, ImageFacts, PortFacts
from deploytool.deploy.plan import UpOptions, plan_up
from deploytool.deploy.steps import Start
from deploytool.errors import UsageError
from deploytool.host.releases import Release
from deploytool.host.slots import Slot
from deploytool.profiles import SecretError, SecretRef, load_profile
from deploytool.release import inputs as release_inputs
from deploytool.release.state import SlotPointers
from deploytool.release.weights import ModelMissing

KEY = "sk-plan-test-7f3a9"


def _profile(tmp_path: Path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    profile = load_profile("sim").model_copy(deep=True)
    profile.model.host_path = str(write_model_folder(tmp_path / "weights"))
    profile.server.api_key = SecretRef(file=str(key_file))
    return profile


def _facts(profile, **fields) -> Facts:
    from deploytool.image.build import plan_build

    serving = Release(
        slot="cpu",
        release=1,
        profile="sim",
        image="deploytool/sim:old",
        container_id="id1",
        container_name="deploytool-cpu-r1-server",
        state="running",
        health="healthy",
        host_port=30000,
        gpus=[],
        simulator=True,
        created="",
    )
    return Facts(
        slot=Slot(),
        releases=[serving],
        pointers=SlotPointers(current=1, next_release=2),
        image=ImageFacts(
            (build := plan_build(profile)).tag,
            True,
            {},
            "deploytool/base:bookworm",
            "sha256:base",
            build=build,
        ),
        port=PortFacts("127.0.0.1", 30000),
        **fields,
    )


def test_the_plan_says_where_weights_and_secrets_go_and_holds_no_value(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    inputs = replace(release_inputs.prepare(profile, bind="127.0.0.1", env={}), secret_env={}, api_key=None)
    plan = plan_up(_facts(profile, inputs=inputs), profile, UpOptions(skip_qualify=True))
    start = next(s for s in plan.steps if isinstance(s, Start) and s.new)
    assert start.secrets == ["sglang_config", "auth_header"]
    assert (
        plan.model is not None
        and plan.model["kind"] == "folder"
        and plan.model["fingerprint"].startswith("sha256:")
    )
    assert plan.record["model"] == plan.model and plan.record["api_key"] == {"file": str(tmp_path / "key")}
    text = "\n".join(plan.lines())
    assert f"model folder {tmp_path / 'weights'} -> {plan.model['container_path']} (read-only)" in text
    assert f"secret sglang_config: host file {tmp_path / 'key'} -> /run/secrets/" in text
    server = plan.compose["services"]["server"]
    assert {"source": "sglang_config", "target": "/run/secrets/deploytool-sglang-config.yaml"} in server[
        "secrets"
    ]
    assert plan.compose["secrets"]["sglang_config"] == {"environment": "DEPLOYTOOL_SECRET_SGLANG_CONFIG"}
    assert KEY not in json.dumps(plan.to_json()) and KEY not in text


def test_missing_weights_or_an_unreadable_secret_is_refused_before_any_step(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    for error in (
        ModelMissing("model folder /gone does not exist (model.host_path)"),
        SecretError("the API key comes from file /gone, which cannot be read"),
    ):
        with pytest.raises(type(error), match="/gone"):
            plan_up(_facts(profile, inputs_error=error), profile, UpOptions(skip_qualify=True))
    # and the facts say so when the host lacks them (prepare runs at fact-gathering time)
    (tmp_path / "key").unlink()
    with pytest.raises(SecretError, match="cannot be read"):
        release_inputs.prepare(profile, bind="127.0.0.1", env={})


def test_publishing_beyond_loopback_without_a_key_is_refused_unless_said_and_then_warned(
    tmp_path: Path,
) -> None:
    profile = load_profile("sim").model_copy(deep=True)
    inputs = release_inputs.prepare(profile, bind="0.0.0.0", env={})
    with pytest.raises(UsageError, match="--expose-without-key"):
        plan_up(_facts(profile, inputs=inputs), profile, UpOptions(skip_qualify=True, bind="0.0.0.0"))
    plan = plan_up(
        _facts(profile, inputs=inputs),
        profile,
        UpOptions(skip_qualify=True, bind="0.0.0.0", expose_without_key=True),
    )
    assert any("without an API key" in w for w in plan.warnings)
    assert next(s for s in plan.steps if isinstance(s, Start) and s.new).secrets == []
