"""The planner against two real SGLang starts on an H200 (docs/measured/h200-draft-share/):
SGLang 0.5.17, the Qwen3.6-35B-A3B-shaped folder with dummy bf16 weights, MTP, stock and with
the draft-sharing patch. The server's own /server_info is replayed through preflight's
comparison (memory/accuracy.py): every figure within 3%."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploytool.memory.accuracy import compare_with_server
from deploytool.memory.profile_plan import plan_memory_command

ROOT = Path(__file__).parent.parent
MEASURED = ROOT / "docs" / "measured" / "h200-draft-share"
FOLDER = Path(__file__).parent / "data" / "models" / "qwen36-35b-a3b-shape"
LAUNCH = ["context-length=262144", "mem-fraction-static=0.55", "max-running-requests=8", "speculative-algorithm=NEXTN",
          "speculative-num-steps=5", "speculative-eagle-topk=1", "speculative-num-draft-tokens=6",
          "mamba-ssm-dtype=bfloat16", "mamba-radix-cache-strategy=no_buffer", "disable-overlap-schedule=true",
          "kv-cache-dtype=bfloat16"]
RUNS = {"stock": "none", "draft-share": "0002-draft-shares-embed-and-head-before-pool.patch"}


def _run(name: str):
    plan = plan_memory_command("h200-qwen3.6-35b-a3b-fp8", card="h200", sets=LAUNCH, checkpoint=FOLDER,
                               patches=RUNS[name])
    info = json.loads((MEASURED / f"server_info-{name}.json").read_text())
    return plan, info, compare_with_server(plan, info)


@pytest.mark.parametrize("name", list(RUNS))
def test_every_figure_the_server_reports_is_within_three_percent(name: str) -> None:
    plan, info, record = _run(name)
    assert info["internal_states"][0]["speculative_num_draft_tokens"] == 6  # the launch replayed
    assert set(record["error_pct"]) == {"weights_gib", "kv_pool_gib", "pool_tokens", "max_running_requests"}
    for figure, error in record["error_pct"].items():
        assert abs(error) <= 3.0, (name, figure, error, record["predicted"], record["reported"])
    assert record["predicted"]["max_running_requests"] == record["reported"]["max_running_requests"] == 8
    assert plan.state_slots == info["internal_states"][0]["max_mamba_cache_size"]


def test_the_patch_moves_the_pool_by_what_the_planner_predicts() -> None:
    (stock, _, a), (shared, _, b) = _run("stock"), _run("draft-share")
    measured = b["reported"]["pool_tokens"] - a["reported"]["pool_tokens"]
    predicted = shared.pool_tokens - stock.pool_tokens
    assert measured == 367_831 - 284_583
    assert abs(predicted - measured) / measured <= 0.03
    # the target's weights do not move; the draft's private embedding and head leave the budget
    assert a["reported"]["weights_gib"] == b["reported"]["weights_gib"] and stock.weights_gib == shared.weights_gib
    assert stock.draft_weights_gib - shared.draft_weights_gib == pytest.approx(248_320 * 2048 * 2 * 2 / 2**30, abs=0.01)
