"""tune names the machine and card of every start, and says so when one search's figures come
from more than one machine (a search resumed on another host): the cards a local process sees
are the ones CUDA_VISIBLE_DEVICES leaves it, read through NVML (here the stand-in over described
hosts); a resumed journal whose starts ran elsewhere gets a warning naming what ran where."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import run_cli
from tune_helpers import write_profile

from deploytool.host.nvml_standin import StandInNvml
from deploytool.host.slots import Slot
from deploytool.tune.machines import machine_id, visible_uuids

HOSTS = Path(__file__).parent / "data" / "nvml-hosts"
A = "GPU-5090a001-6c1e-4f0b-9a7d-3e2f1b0c9d8e"
B = "GPU-5090b002-2a4c-4d6e-8f01-23456789abcd"


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [A, B]),  # unset: every card
        ("1", [B]),  # an index
        ("GPU-5090b", [B]),  # a UUID prefix, as CUDA takes it
        ("1,0", [B, A]),  # CUDA's order, not NVML's
        ("0,7,1", [A]),  # CUDA stops at the first entry it cannot resolve
        ("", []),  # set but empty: no card
        ("GPU-5090,1", []),  # a prefix both cards share: CUDA refuses it, and the list stops there
        ("MIG-4a2c,0", ["MIG-4a2c", A]),  # a MIG instance is no card NVML lists: kept as written
    ],
)
def test_the_cards_a_local_process_sees_follow_cuda_visible_devices(
    visible: str | None, expected: list[str]
) -> None:
    nvml = StandInNvml.from_file(HOSTS / "rtx5090x2.yaml")
    assert visible_uuids(visible, nvml) == expected


def test_a_machine_is_the_host_and_its_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    host = socket.gethostname()
    real = SimpleNamespace(is_simulator=False, server=SimpleNamespace(env={}))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert machine_id(real, None, StandInNvml.from_file(HOSTS / "rtx5090x2.yaml")) == f"{host} {B}"
    # the profile's own environment is the server's, over the shell's
    pinned = SimpleNamespace(is_simulator=False, server=SimpleNamespace(env={"CUDA_VISIBLE_DEVICES": "0"}))
    assert machine_id(pinned, None, StandInNvml.from_file(HOSTS / "rtx5090x2.yaml")) == f"{host} {A}"
    assert machine_id(real, Slot(gpus=(A,))) == f"{host} {A}"
    assert machine_id(real, None, StandInNvml.from_file(HOSTS / "no-driver.yaml")) == f"{host} (no card read)"
    assert machine_id(SimpleNamespace(is_simulator=True), None) == f"{host} (CPU, reference runtime)"


def test_a_search_resumed_on_another_machine_says_which_candidates_ran_where(tmp_path: Path) -> None:
    profiles = write_profile(
        tmp_path / "profiles", tune={"flags": {"max-running-requests": [2, 8]}, "rounds": 1, "repeats": 1}
    )
    report = tmp_path / "report"
    args = [
        "tune",
        "--profile",
        "tune-sim",
        "--profiles-dir",
        str(profiles),
        "--report",
        str(report),
        "--local",
        "--no-qualify",
    ]
    whole = run_cli(*args, "--json", timeout=300)
    data = json.loads(whole.stdout)
    assert data["machine_note"] is None, data["machine_note"]
    here = f"{socket.gethostname()} (CPU, reference runtime)"
    assert [s["machine"] for c in data["candidates"] for s in c["starts"]] == [here, here]

    # base's start is made to say another machine ran it, as when a lent card's next call lands
    # on another host; the resumed search has nothing left to start and reports from the journal
    journal = report / "journal.jsonl"
    lines = [json.loads(x) for x in journal.read_text().splitlines()]
    for x in lines:
        if x["kind"] == "start" and x["candidate"] == "base":
            x["machine"] = "lent-1 GPU-902fbb9d-b99b-972e-6fe3-7af41ed2314c"
    journal.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = json.loads(run_cli(*args, "--resume", "--json", timeout=300).stdout)
    note = out["machine_note"]
    assert (
        note and "2 machines" in note and "base on lent-1 GPU-902fbb9d" in note and f"c01 on {here}" in note
    ), note
    assert note in (report / "report.md").read_text()
    human = run_cli(*args, "--resume", timeout=300)
    assert f"warning: {note}" in human.stdout, human.stdout

    # a journal from before starts named their machine reads as "not recorded", not as this host
    for x in lines:
        if x["kind"] == "start":
            x.pop("machine")
    journal.write_text("".join(json.dumps(x) + "\n" for x in lines))
    old = json.loads(run_cli(*args, "--resume", "--json", timeout=300).stdout)
    assert old["machine_note"] is None  # one machine, unknown: nothing to compare across

    # an older journal resumed here: one start recorded, one not, which may or may not be the same
    # machine; said as unknown, not counted as a second machine
    for x in lines:
        if x["kind"] == "start" and x["candidate"] == "c01":
            x["machine"] = here
    journal.write_text("".join(json.dumps(x) + "\n" for x in lines))
    mixed = json.loads(run_cli(*args, "--resume", "--json", timeout=300).stdout)["machine_note"]
    assert (
        mixed and mixed.startswith("some starts did not record their machine") and "2 machines" not in mixed
    )
    assert "base on not recorded" in mixed and f"c01 on {here}" in mixed, mixed

    # a field this release does not know is refused with the line's number, not a traceback
    next(x for x in lines if x["kind"] == "start")["from_a_newer_release"] = 1
    journal.write_text("".join(json.dumps(x) + "\n" for x in lines))
    newer = run_cli(*args, "--resume", "--json", timeout=300)
    assert (
        newer.returncode == 2
        and "is not a journal line of this space" in json.loads(newer.stdout)["error"]["message"]
    )
