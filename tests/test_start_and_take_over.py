"""A release is never started or taken over in place of another without being asked, on the real
engine through the real CLI: `start` starts the slot's current release or refuses, naming it and
the ways on (`--release N` starts another, saying so); a slot whose serving release was started
from another state folder (another person's deploytool on the same engine and instance) is not
stopped, rolled back, rolled out or removed without --take-over, and a dry run refuses alike."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import free_port
from lifecycle_helpers import slot_status, up

from deploytool.host import labels

pytestmark = pytest.mark.index  # the sim image's wheels are downloaded once (then cached)


def _json(out: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(out.stdout)


def _states() -> dict[int, str]:
    return {r["release"]: r["state"] for r in slot_status()["releases"]}


def test_start_refuses_when_the_current_release_is_gone_and_starts_another_only_when_named(
    slot_env, docker_engine
):
    assert up(slot_env, "t-good").returncode == 0
    assert up(slot_env, "t-good2").returncode == 0
    back = slot_env("rollback", "--cpu", "--json")  # release 1 serves; 2 was rolled back from
    assert back.returncode == 0, back.stderr
    assert slot_env("stop", "--cpu", "--drain-timeout", "0").returncode == 0
    # release 1's container is removed outside deploytool
    docker_engine.client.containers.get(docker_engine.release("cpu", 1).container_name).remove(force=True)
    assert _states() == {2: "exited"}

    refused = slot_env("start", "--cpu")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    said = " ".join(refused.stderr.split())
    assert "slot cpu's current release 1 is not on this engine" in said
    assert "nothing was started in its place" in said
    assert "`deploytool up --cpu --profile NAME`" in said
    assert "`deploytool rollback --cpu` starts the rollback target, release 2" in said
    assert "`deploytool start --cpu --release N`" in said
    assert _states() == {2: "exited"}  # release 2, the one rolled back from, was not started
    as_json = slot_env("start", "--cpu", "--json")
    assert (
        as_json.returncode == 1
        and "current release 1 is not on this engine" in _json(as_json)["error"]["message"]
    )

    plan = slot_env("start", "--cpu", "--release", "2", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "starts release 2 in place of the slot's current release 1 (--release)" in plan.stdout
    started = slot_env("start", "--cpu", "--release", "2")
    assert started.returncode == 0, started.stderr
    assert "release 2 serves again" in started.stdout
    assert "in place of release 1, the slot's current release until now" in started.stdout
    status = slot_status()
    assert (status["current"], status["serving"]) == (2, 2)
    missing = slot_env("start", "--cpu", "--release", "7", "--json")
    assert missing.returncode == 1 and "already serves" in _json(missing)["error"]["message"]


def test_a_slot_started_from_another_state_folder_is_not_taken_over_unasked(slot_env, tmp_path):
    assert up(slot_env, "t-good").returncode == 0  # the first person's release 1 serves
    other = {"DEPLOYTOOL_HOME": str(tmp_path / "second-person")}  # the same engine and instance

    def second(*args: str) -> subprocess.CompletedProcess[str]:
        return slot_env(*args, env=other)

    dry_runs = (
        ("up", "--cpu", "--profile", "t-good2", "--skip-qualify", "--dry-run"),
        ("stop", "--cpu", "--dry-run"),
        ("rollout", "--cpu", "--profile", "t-good2", "--dry-run"),
        ("up", "--cpu", "--profile", "t-good2", "--dry-run"),
    )
    # the dry runs at once (each only reads; the state is checked after all the refusals), the
    # others one at a time: each takes the second person's lock of the slot before it refuses
    with ThreadPoolExecutor(len(dry_runs)) as pool:
        dry_refusals = list(pool.map(lambda args: second(*args), dry_runs))
    acting = (
        ("up", "--cpu", "--profile", "t-good2", "--skip-qualify"),
        ("stop", "--cpu"),
        ("rollback", "--cpu"),
        ("down", "--cpu"),
    )
    refusals = [*zip(dry_runs, dry_refusals, strict=True), *((args, second(*args)) for args in acting)]
    for args, refused in refusals:
        said = " ".join(refused.stderr.split())
        assert refused.returncode == 1, (args, refused.stdout, refused.stderr)
        assert "release 1 (serving) of slot cpu was started from another state folder" in said, (args, said)
        assert "DEPLOYTOOL_INSTANCE" in said and "DEPLOYTOOL_HOME" in said and "--take-over" in said, said
        assert "Nothing was changed" in said
    assert _states() == {1: "running"}
    assert "`up` would stop it and cut over to a release of yours" in " ".join(
        dry_refusals[-1].stderr.split()
    )

    # beside it, under an instance of its own (and another port), the second person plans freely
    beside = slot_env(
        "up",
        "--cpu",
        "--profile",
        "t-good2",
        "--dry-run",
        "--port",
        str(free_port()),
        env={**other, "DEPLOYTOOL_INSTANCE": f"{labels.instance()}-beside"},
    )
    assert beside.returncode == 0, beside.stderr
    assert "serving now nothing, would make release 1" in beside.stdout

    # --take-over: asked for, done; then the first person's folder has no record of release 2
    taken = second("up", "--cpu", "--profile", "t-good2", "--skip-qualify", "--take-over", "--json")
    assert taken.returncode == 0, taken.stderr
    assert _json(taken)["release"] == 2 and _states() == {1: "exited", 2: "running"}
    mine = slot_env("stop", "--cpu", "--json")
    assert mine.returncode == 1
    assert (
        "release 2 (serving) of slot cpu was started from another state folder"
        in _json(mine)["error"]["message"]
    )
