"""The upper edge held to SGLang's own lines from real starts on the lent H200 (SGLang 0.5.17;
tests/data/sglang-real/*/run.json `memory_log`, the GPU harness's recordings): the memory free
once the pool is allocated ("Memory pool end. avail mem", the last one), what the graph capture
took ("Capture ... CUDA graph end. mem usage"), and what is free when the server is ready
("available_gpu_mem"). The plan is made from the harness profile that launched each start and
the folder it served, as in tests/test_memory_plan_matches_real_h200.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from deploytool.memory.profile_plan import plan_memory_command
from deploytool.memory.request import PlanMemoryRequest

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "sglang-real"
PROFILES = ROOT / "scripts" / "gpu-check" / "profiles"
STARTS = {
    "dense": ("gpu-check-qwen3-tiny", "qwen3-tiny"),
    "hybrid-mtp": ("gpu-check-qwen36-tiny-mtp", "qwen36-tiny"),
}


def lines(start: str) -> list[str]:
    return json.loads((REAL / start / "run.json").read_text())["memory_log"]


def figures(start: str) -> dict[str, float]:
    text = lines(start)
    gb = lambda pattern: [float(m.group(1)) for x in text if (m := re.search(pattern, x))]  # noqa: E731
    return {
        "pool_end": gb(r"Memory pool end\. avail mem=([\d.]+) GB")[-1],
        "ready": gb(r"available_gpu_mem=([\d.]+) GB")[-1],
        "graphs": sum(gb(r"CUDA graph end\..*mem usage=([\d.]+) GB")),
        "capture_begin": gb(r"CUDA graph begin\..*avail mem=([\d.]+) GB")[0],
    }


def plan(start: str):
    profile, model = STARTS[start]
    return plan_memory_command(
        PlanMemoryRequest.from_options(
            profile, card="h200", checkpoint=REAL / "models" / model, profiles_dirs=[PROFILES]
        )
    )


def beside(p, start: str) -> float:
    return sum(i["gib"] for i in p.beside_pool if i["what"].startswith(start))


@pytest.mark.parametrize("start", list(STARTS))
def test_what_the_start_allocates_between_the_pool_and_ready_is_the_plans(start: str) -> None:
    """SGLang's lines: the last "Memory pool end" less "available_gpu_mem" is the workspace and
    the graphs; the plan's items for them within 0.05 GiB."""
    seen, p = figures(start), plan(start)
    edge = p.upper_edge
    assert edge["free_after_pool_gib"] - edge["free_after_capture_gib"] == pytest.approx(
        seen["pool_end"] - seen["ready"], abs=0.05
    )
    # the workspace (before the first capture) alone, and the graphs: the plan is not below them
    workspace = beside(p, "workspace after the pool")
    assert workspace == pytest.approx(seen["pool_end"] - seen["capture_begin"], abs=0.03)
    graphs = beside(p, "decode CUDA graphs") + beside(p, "CUDA graphs")
    # (SGLang rounds each line to 0.01 GB)
    assert seen["graphs"] - 0.01 <= graphs <= seen["graphs"] * 1.3 + 0.01


def test_the_dense_start_is_planned_to_the_line() -> None:
    """The dense start's own figures, absolute: free after the pool and when ready (GiB)."""
    seen, edge = figures("dense"), plan("dense").upper_edge
    assert edge["free_after_pool_gib"] == pytest.approx(seen["pool_end"], abs=0.02)
    assert edge["free_after_capture_gib"] == pytest.approx(seen["ready"], abs=0.03)


def test_the_hybrid_starts_free_list_and_draft_pool_come_off_before_the_pool_ends() -> None:
    """The hybrid with MTP: the draft's KV pool and the allocator's free list are allocated
    before the last "Memory pool end". The recorded start sized its pool on 0.477 GiB more than
    three later starts of the same launch (docs/memory.md); the probed start's line (14.98 GB,
    docs/measured/h200-preload-probe/h1.memory-lines.log) is the one the plan is held to."""
    probe = (ROOT / "docs" / "measured" / "h200-preload-probe" / "h1.memory-lines.log").read_text()
    ends = [float(x) for x in re.findall(r"Memory pool end\. avail mem=([\d.]+) GB", probe)]
    assert plan("hybrid-mtp").upper_edge["free_after_pool_gib"] == pytest.approx(ends[-1], abs=0.03)
