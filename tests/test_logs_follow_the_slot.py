"""`logs --follow`'s choice of what to read next, on an engine that plays a script of states:
without --release it follows the slot to whichever release serves it next (saying so once,
reading the new release from its start this time); with --release N it stays on N; it ends
when what it follows is removed. The real engine's side: test_slot_stop_start_down_logs.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deploytool.deploy import slot_commands as slots
from deploytool.host.releases import Release
from deploytool.host.slots import Slot


def release(number: int, state: str = "running", started: str = "2026-12-03T10:00:00.123456789Z") -> Release:
    return Release(
        slot="cpu",
        release=number,
        profile="p",
        image="i",
        container_id=f"c{number}",
        container_name=f"r{number}",
        state=state,
        health=None,
        host_port=1,
        gpus=[],
        simulator=True,
        created="",
        started=started,
    )


class ScriptedEngine:
    """Each followed stream yields its release's lines and ends (the container stopped); each
    poll of the slot's releases takes the next state of the script."""

    def __init__(self, states: list[list[Release]]):
        self.states, self.reads = states, []

    def releases(self, slot: str) -> list[Release]:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def logs(self, chosen: Release, *, tail=None, since=None, follow=False):
        self.reads.append((chosen.release, since))
        return iter([f"r{chosen.release} line\n".encode()])


def follow(engine: ScriptedEngine, **kwargs) -> list[str]:
    request = slots.LogsRequest(Slot(), follow=True, **kwargs)
    return list(slots.logs(request, engine=engine, poll_s=0))  # type: ignore[arg-type]


def test_without_release_it_follows_the_slot_to_its_next_serving_release():
    one, two = release(1), release(2, started="2026-12-03T10:05:00.5Z")
    engine = ScriptedEngine(
        [
            [one],  # chosen: the serving release
            [replace(one, state="exited")],  # stopped for the hand-over: wait
            [replace(one, state="exited"), two],  # a new up: 2 serves
            [replace(one, state="exited"), replace(two, state="exited")],  # stop: wait
            [one, replace(two, state="exited")],  # rollback: 1 serves again
            [],
        ]
    )  # down: all removed, the end
    lines = follow(engine)
    assert lines == [
        "r1 line",
        "deploytool: slot cpu is served by release 2 now (was release 1); its log follows",
        "r2 line",
        "deploytool: slot cpu is served by release 1 now (was release 2); its log follows",
        "r1 line",
    ]
    assert isinstance(lines[1], slots.SlotNotice) and (lines[1].release, lines[1].was) == (2, 1)
    # each release after a change is read from when it started this time, not from its first run
    assert [n for n, _ in engine.reads] == [1, 2, 1]
    assert engine.reads[1][1] == 1796292300.5 and engine.reads[2][1] == pytest.approx(
        1796292000.123457, abs=1e-5
    )


def test_a_restart_of_the_same_release_is_no_change():
    one = release(1)
    engine = ScriptedEngine([[one], [replace(one, state="exited")], [one], []])
    assert follow(engine) == ["r1 line", "r1 line"]


def test_with_release_it_stays_on_that_release():
    one, two = release(1, state="exited"), release(2)
    engine = ScriptedEngine([[one, two], [one, two], [one, replace(two, state="exited")], [two]])
    assert follow(engine, release=1) == ["r1 line"]  # 2 serving is not followed; 1 removed: the end
    assert [n for n, _ in engine.reads] == [1]
