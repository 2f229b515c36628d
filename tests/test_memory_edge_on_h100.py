"""The memory plan's upper edge held to starts on a card it was never tuned to: a lent H100
80GB HBM3 (SGLang 0.5.17, random weights; scripts/gpu-check/edge.py, docs/measured/
h100-upper-edge.md). tests/data/sglang-real/h100-edge/edge.json keeps every start: the argv,
the fraction, whether it served one request of the full chunk or how it died, and SGLang's own
memory lines. The plan is made for the table's H100 from the harness profile of each launch
with the start's own flags, as `plan-memory --card h100 --set ...` would make it."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

from deploytool.memory.plan import MemoryPlan
from deploytool.memory.profile_plan import plan_memory_command
from deploytool.memory.request import PlanMemoryRequest

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "sglang-real"
RECORD = json.loads((REAL / "h100-edge" / "edge.json").read_text())
PROFILES = ROOT / "scripts" / "gpu-check" / "profiles"
# the flags each launch sets beyond its harness profile (edge.py LAUNCHES), and the profile
LAUNCH_FLAGS = (
    "--cuda-graph-max-bs",
    "--chunked-prefill-size",
    "--max-running-requests",
    "--mamba-radix-cache-strategy",
    "--mem-fraction-static",
)


def _launch(start: dict) -> tuple[str, str, tuple[str, ...]]:
    """(profile, model folder, --set values) of one recorded start."""
    argv = start["argv"]
    sets = [f"{flag[2:]}={argv[argv.index(flag) + 1]}" for flag in LAUNCH_FLAGS if flag in argv]
    if start["id"].startswith("dense"):
        return "gpu-check-qwen3-tiny", "qwen3-tiny", tuple(sets)
    if "--speculative-algorithm" not in argv:  # the hybrid profile's NEXTN, turned off
        sets.append("speculative-algorithm=NONE")
    return "gpu-check-qwen36-tiny-mtp", "qwen36-tiny", tuple(sets)


@cache
def _plan(profile: str, model: str, sets: tuple[str, ...]) -> MemoryPlan:
    return plan_memory_command(
        PlanMemoryRequest.from_options(
            profile,
            card="h100",
            sets=list(sets),
            checkpoint=REAL / "models" / model,
            profiles_dirs=[PROFILES],
        )
    )


def plan(start: dict) -> MemoryPlan:
    return _plan(*_launch(start))


def pool_tokens(start: dict) -> int | None:
    """The target's pool as SGLang allocated it (the first "KV Cache is allocated" line)."""
    found = [re.search(r"KV Cache is allocated\..*#tokens: (\d+)", x) for x in start["memory_lines"]]
    return next((int(m.group(1)) for m in found if m), None)


def died_of_memory(start: dict) -> bool:
    return start["outcome"].startswith("died") and any("CUDA out of memory" in x for x in start["tail"])


STARTS = RECORD["starts"]
LAUNCHES = sorted({s["id"] for s in STARTS})


def test_the_record_holds_served_starts_and_starts_that_died_of_memory() -> None:
    """What the tests below read is there: each outcome, and the pool line of every start."""
    assert any(s["outcome"] == "served" for s in STARTS)
    assert any(died_of_memory(s) for s in STARTS)
    assert all(pool_tokens(s) for s in STARTS)


@pytest.mark.parametrize("start", STARTS, ids=lambda s: f"{s['id']}@{s['fraction']}")
def test_the_pool_is_planned_within_two_tenths_of_a_percent(start: dict) -> None:
    """The standard every pool figure is held to: the plan's tokens against SGLang's line."""
    seen = pool_tokens(start)
    assert plan(start).pool_tokens == pytest.approx(seen, rel=0.002)


@pytest.mark.parametrize(
    "start", [s for s in STARTS if died_of_memory(s)], ids=lambda s: f"{s['id']}@{s['fraction']}"
)
def test_a_start_that_died_of_memory_is_one_the_plan_refuses(start: dict) -> None:
    p = plan(start)
    assert p.max_mem_fraction_static is not None and p.max_mem_fraction_static < start["fraction"]
    assert p.verdict == "error"
    assert any("mem-fraction-static" in problem for problem in p.problems), p.problems


@pytest.mark.parametrize("launch", LAUNCHES)
def test_the_plans_edge_lies_between_what_served_and_what_died(launch: str) -> None:
    """The highest fraction the plan allows is below every start that died of memory, and not
    below a start that served by more than one step of its three-decimal grid."""
    runs = [s for s in STARTS if s["id"] == launch]
    edge = plan(runs[0]).max_mem_fraction_static
    assert edge is not None
    served = [s["fraction"] for s in runs if s["outcome"] == "served"]
    died = [s["fraction"] for s in runs if died_of_memory(s)]
    if served:
        assert edge >= max(served) - 0.001 - 1e-9, (edge, served)
    if died:
        assert edge < min(died), (edge, died)
