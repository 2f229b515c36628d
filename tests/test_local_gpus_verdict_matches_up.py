"""`profiles list --local-gpus`, `profiles list --gpu` and `slots` judge a slot as `up` and
`plan-memory` do: a profile whose memory plan they refuse on a card is incompatible there,
saying why, never runnable-with-less-memory (the RTX PRO 6000 profile on an RTX 5090 of a
described host: 32 GiB where it wants 94, and 8 running requests where its gates want 32)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_cli

HOST = Path(__file__).resolve().parent / "data" / "nvml-hosts" / "mixed-5090-pro6000.yaml"
PRO = "rtx-pro-6000-qwen3.6-35b-a3b-nvfp4"
FIVE = "GPU-5090c003-1b2c-4d3e-8f40-5a6b7c8d9e0f"  # the host's RTX 5090


def test_a_slot_up_refuses_by_memory_is_incompatible_everywhere_it_is_listed(tmp_path: Path) -> None:
    env = {"DEPLOYTOOL_NVML_STANDIN": str(HOST), "DEPLOYTOOL_HF_HOME": str(tmp_path / "hf")}
    plan_memory = run_cli("plan-memory", "--profile", PRO, "--gpu", FIVE, "--json", env=env)
    up = run_cli("up", "--gpu", FIVE, "--profile", PRO, "--dry-run", "--json", env=env)
    assert plan_memory.returncode == 1 and up.returncode == 1, (plan_memory.stderr, up.stdout)
    assert "does not fit slot" in json.loads(up.stdout)["error"]["message"]

    local = json.loads(run_cli("profiles", "list", "--local-gpus", "--json", env=env).stdout)
    (row,) = [r for r in local["profiles"] if r["profile"] == PRO]
    by_card = {s["uuids"][0]: s for s in row["slots"]}
    assert by_card[FIVE]["verdict"] == "incompatible", by_card[FIVE]
    assert any(
        "as `up` and `plan-memory` judge it" in r and f"--gpu {FIVE}" in r for r in by_card[FIVE]["reasons"]
    )
    assert row["verdict"] == "runnable"  # its best slot: the RTX PRO 6000 beside it
    named = json.loads(run_cli("profiles", "list", "--gpu", FIVE, "--json", env=env).stdout)
    assert {f["profile"]: f["verdict"] for f in named["profiles"]}[PRO] == "incompatible"
    slots = json.loads(run_cli("slots", "--profile", PRO, "--json", env=env).stdout)
    assert [s["verdict"] for s in slots["slots"] if FIVE in s["uuids"]] == ["incompatible"]
    everywhere = [s["verdict"] for r in local["profiles"] for s in r["slots"]] + [
        f["verdict"] for f in named["profiles"]
    ]
    assert "runnable-with-less-memory" not in everywhere
