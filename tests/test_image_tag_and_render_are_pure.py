"""The image tag derives from declared inputs alone: no engine, no build context, no download.
So `render` works on a machine that has neither the base image nor any Docker engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from deploytool.image.build import BASE_BY_TAG, plan_build, stale_reason
from deploytool.profiles import ProfileStore

CARD = "b300x8-glm5.2-nvfp4-tp8"
UUID = "GPU-698e6783-c3a1-e93d-9440-6334680c7c1f"
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def test_render_of_a_card_profile_needs_no_engine_and_no_base_image(tmp_path: Path):
    out = run_cli("render", "--gpu", UUID, "--profile", CARD, env=NO_ENGINE)
    assert out.returncode == 0, out.stderr
    planned = plan_build(ProfileStore().get(CARD)).tag
    assert f"image: {planned}" in out.stdout
    assert planned.endswith(f"-{BASE_BY_TAG}")  # the CUDA base is named by tag only: the tag says so


def test_the_tag_is_stable_and_writes_nothing(deploytool_home: Path):
    profile = ProfileStore().get(CARD)
    before = sorted(p for p in deploytool_home.rglob("*") if p.name != "cache")
    first, second = plan_build(profile), plan_build(profile)
    assert first.tag == second.tag and first.inputs_hash == second.inputs_hash
    assert sorted(p for p in deploytool_home.rglob("*") if p.name != "cache") == before
    assert "FROM " + profile.image.base in first.dockerfile


def test_a_declared_input_changes_the_tag_and_a_digest_pinned_base_drops_the_note():
    profile = ProfileStore().get(CARD)
    pinned = profile.model_copy(
        update={
            "image": profile.image.model_copy(update={"base": profile.image.base + "@sha256:" + "0" * 64})
        }
    )
    tag = plan_build(profile).tag
    pinned_tag = plan_build(pinned).tag
    assert pinned_tag != tag and not pinned_tag.endswith(BASE_BY_TAG)
    # The launch command is baked into the image (CMD): another flag is another image.
    flags = {**profile.server.args, "log-level": "debug"}
    relaunched = profile.model_copy(update={"server": profile.server.model_copy(update={"args": flags})})
    assert plan_build(relaunched).tag != tag


def test_a_base_tag_that_moved_makes_the_same_tag_stale():
    plan = plan_build(ProfileStore().get("sim"))
    assert stale_reason(plan, None, "sha256:a") == "no image with these inputs yet"
    recorded = {"org.opencontainers.image.base.digest": "sha256:a"}
    assert stale_reason(plan, recorded, "sha256:a") is None
    assert "has moved" in (stale_reason(plan, recorded, "sha256:b") or "")
    # a label written otherwise by an earlier deploytool (e.g. a host path it no longer records)
    old = {**recorded, **plan.labels, "org.opencontainers.image.title": "an older title"}
    assert stale_reason(plan, old, "sha256:a") == (
        "its label(s) org.opencontainers.image.title are not what this deploytool writes for these inputs"
    )
    assert stale_reason(plan, {**recorded, **plan.labels}, "sha256:a") is None


@pytest.mark.parametrize("command", [["up", "--cpu", "--profile", "sim"], ["status"], ["rollback", "--cpu"]])
def test_commands_that_need_the_engine_say_so_with_exit_3(command: list[str]):
    out = run_cli(*command, env=NO_ENGINE)
    assert out.returncode == 3, out.stderr
    assert "no Docker engine is reachable" in out.stderr and "Traceback" not in out.stderr


# -- a locked profile: the locks stand for the wheels -------------------------------------------
WHEELS = "rtx5090-qwen3.6-35b-a3b-nvfp4-wheels"


def test_render_of_the_wheels_profile_needs_no_engine():
    out = run_cli("render", "--gpu", UUID, "--profile", WHEELS, env=NO_ENGINE)
    assert out.returncode == 0, out.stderr
    assert f"image: {plan_build(ProfileStore().get(WHEELS)).tag}" in out.stdout


def test_a_locked_profiles_tag_reads_no_wheel_and_follows_its_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from deploytool.image import cudabase, locks

    def refuse(*args, **kwargs):
        raise AssertionError("computing the tag touched a wheelhouse")

    monkeypatch.setattr(cudabase, "fill", refuse)
    monkeypatch.setattr(cudabase, "verify", refuse)
    profile = ProfileStore().get(WHEELS)
    plan = plan_build(profile)
    # a wheelhouse given to the build does not change the tag either: the locks name the wheels
    assert plan_build(profile, wheelhouse=tmp_path).tag == plan.tag
    assert plan.fingerprint["wheel_lock"] == locks.venv_lock(profile).digest
    assert set(plan.inputs.fetched) == {"cuda-wheels", "wheels"}

    # Another lock (here the same wheels, one more comment line) is another image.
    changed = tmp_path / locks.venv_lock_path(profile).name
    changed.write_text(locks.venv_lock_path(profile).read_text() + "# relocked\n")
    monkeypatch.setattr(locks, "venv_lock_path", lambda profile, target_arch=None: changed)
    assert plan_build(profile).tag != plan.tag
