"""`down` on the real engine says what goes and, apart, what a failure would bring back; a
second `down` (without --volumes) says what is still there instead of calling it absent."""

from __future__ import annotations

import json

from lifecycle_helpers import up

from deploytool.host.slots import Slot
from deploytool.release.state import slot_path


def test_down_lists_what_goes_apart_from_its_restore_and_a_second_down_says_what_remains(
    slot_env, docker_engine
):
    assert up(slot_env, "t-good").returncode == 0
    gone = slot_env("down", "--cpu")
    assert gone.returncode == 0, gone.stderr
    goes = [line for line in gone.stderr.splitlines() if "goes:" in line]
    assert [line.split("goes: ", 1)[1].split(".", 1)[0] for line in goes] == ["1", "2", "3"], gone.stderr
    assert "stop release 1" in goes[0] and "remove release 1" in goes[1]
    assert not [line for line in goes if "on failure" in line or "start release 1 again" in line], goes
    assert "if a step fails before release 1 is removed, it is brought back: " in gone.stderr
    assert "start release 1 again" in gone.stderr.split("it is brought back: ", 1)[1]

    volume, state = Slot().cache_volume(), slot_path("cpu")
    assert docker_engine.volume_exists(volume) and state.exists()  # kept without --volumes
    again = slot_env("down", "--cpu", "--json")
    assert again.returncode == 1
    error = json.loads(again.stdout)["error"]
    assert "no release, network, cache volume or state" not in error["message"], error
    assert f"still there: its JIT cache volume {volume} and its state folder {state}" in error["message"], (
        error
    )
    assert "deploytool down --cpu --volumes" in error["hint"]
    assert slot_env("down", "--cpu", "--volumes").returncode == 0
    assert not docker_engine.volume_exists(volume) and not state.exists()
    nothing = slot_env("down", "--cpu", "--json")
    assert (
        nothing.returncode == 1 and "has nothing to remove" in json.loads(nothing.stdout)["error"]["message"]
    )
