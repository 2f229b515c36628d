"""`rollout --undo --dry-run` says what the undo would roll back, slot by slot, last first: from
which release to which, or why a slot is left alone; it changes nothing."""

from __future__ import annotations

import json

from conftest import run_cli

from deploytool.deploy.rollout_plan import RolloutRequest
from deploytool.host.slots import cpu_slot_named
from deploytool.release.state import SlotPointers, journal, read_pointers, write_pointers


def test_undo_dry_run_names_each_slots_roll_back() -> None:
    slots = [cpu_slot_named(n) for n in ("a", "b", "c")]
    options = RolloutRequest(profile_name="sim-v2", slots=tuple(slots))
    # as a rollout journals it: cpu-a and cpu-b upgraded to release 2; cpu-b since moved on to 3 by hand
    journal("rollout.start", rollout="r1", options=options.to_json(), image="img", done=[])
    for name in ("cpu-a", "cpu-b"):
        journal("rollout.slot.done", rollout="r1", slot=name, release=2)
    write_pointers("cpu-a", SlotPointers(current=2, previous=1, next_release=3))
    write_pointers("cpu-b", SlotPointers(current=3, previous=2, next_release=4))
    write_pointers("cpu-c", SlotPointers(current=1, previous=None, next_release=2))

    shown = run_cli("rollout", "--undo", "--dry-run")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "rollout r1 (sim-v2) --undo would, last slot first:",
        "  slot cpu-c: none: not upgraded by this rollout",
        "  slot cpu-b: left alone: serves release 3, not this rollout's 2",
        "  slot cpu-a: roll back from release 2 to release 1",
    ]
    doc = json.loads(run_cli("rollout", "--undo", "--dry-run", "--json").stdout)
    assert doc["dry_run"] is True and doc["undo"]["slots"][-1] == {
        "slot": "cpu-a",
        "action": "roll back",
        "from": 2,
        "to": 1,
        "why": None,
    }
    assert read_pointers("cpu-a").current == 2  # nothing changed
