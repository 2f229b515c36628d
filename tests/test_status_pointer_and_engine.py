"""`deploytool status` names the release that runs and the slot's pointer apart when they differ
(a release that died after its cut-over, a container started behind deploytool's back), and
says nothing extra when they agree."""

from __future__ import annotations

import json

from conftest import BASE_IMAGE, run_cli

from deploytool.deploy.status import disagreement, role
from deploytool.host import labels
from deploytool.host.releases import Release
from deploytool.release.state import SlotPointers, write_pointers


def release(number: int, state: str = "running", restarts: int = 0) -> Release:
    return Release(
        slot="cpu",
        release=number,
        profile="sim",
        image="img",
        container_id=f"c{number}",
        container_name=f"r{number}",
        state=state,
        health=None,
        host_port=1,
        gpus=[],
        simulator=True,
        created="",
        restart_count=restarts,
    )


def test_agreement_reads_as_before():
    pointers = SlotPointers(current=2, previous=1)
    serving = release(2)
    assert role(2, pointers, serving) == "current" and role(1, pointers, serving) == "rollback target"
    assert disagreement(pointers, serving, [serving, release(1, "exited")]) is None


def test_each_side_is_named_when_they_differ():
    pointers = SlotPointers(current=3, previous=2)
    died, older = release(3, "exited", restarts=4), release(2)
    assert role(3, pointers, older) == "current (not serving)"
    assert role(2, pointers, older) == "serving, rollback target"
    said = disagreement(pointers, older, [died, older])
    assert said == (
        "the slot's pointer says release 3 is current (its container is exited after 4 restarts), "
        "but release 2 is what runs"
    )
    assert "nothing runs" in disagreement(pointers, None, [died])
    assert "no pointer" in disagreement(SlotPointers(), older, [older])


def test_status_shows_both_against_the_real_engine(docker_engine):
    """A container labelled as release 2 of a slot runs while the slot's pointer names release 3."""
    slot = "cpu-t22status"
    container = docker_engine.client.containers.run(
        BASE_IMAGE,
        ["sleep", "120"],
        detach=True,
        name=f"deploytool-test-{labels.instance()}-status",
        labels={
            labels.MANAGED: "true",
            labels.INSTANCE: labels.instance(),
            labels.SLOT: slot,
            labels.RELEASE: "2",
            labels.PROFILE: "sim",
            labels.IMAGE: BASE_IMAGE,
            labels.HOST_PORT: "1",
            labels.SIMULATOR: "true",
        },
    )
    try:
        write_pointers(slot, SlotPointers(current=3, previous=2, next_release=4))
        out = run_cli("status", "--json")
        assert out.returncode == 0, out.stderr
        row = next(s for s in json.loads(out.stdout)["slots"] if s["slot"] == slot)
        assert (row["current"], row["serving"], row["previous"]) == (3, 2, 2)
        assert row["disagreement"] == (
            "the slot's pointer says release 3 is current (its container is gone), but release 2 is what runs"
        )
        assert [r["role"] for r in row["releases"]] == ["serving, rollback target"]
        text = run_cli("status")
        assert text.returncode == 0 and "pointer and engine disagree" in text.stdout
        assert f"slot {slot}: serving release 2" in text.stdout
    finally:
        container.remove(force=True)
