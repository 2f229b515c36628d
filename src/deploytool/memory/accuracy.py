"""The prediction next to what the server reports once it runs, so every real deployment
measures the planner's error.

SGLang 0.5.23 reports its pools in server info: `internal_states[].memory_usage`
(managers/scheduler_components/memory_usage.py `build_memory_usage`: weight, kvcache and
startup_available in GB, token_capacity, graph per phase), and max_total_num_tokens /
max_running_requests at the top level.
"""

from __future__ import annotations

from typing import Any

from .cards import GIB
from .plan import MemoryPlan

# (label, what the plan predicts for it, where the server reports it). memory_usage.weight is
# the target model's load (model_runner.weight_load_mem_usage), not the draft's; kvcache is the
# target's pool only (memory_pool.py, MHATokenToKVPool / HybridLinearKVPool `mem_usage`), not
# the draft's KV layers or the linear-attention state.
COMPARED = (
    ("weights_gib", lambda plan: plan.weights_gib, ("memory_usage", "weight")),
    (
        "kv_pool_gib",
        lambda plan: round(plan.pool_tokens * plan.kv_bytes_per_token / GIB, 2),
        ("memory_usage", "kvcache"),
    ),
    ("pool_tokens", lambda plan: plan.pool_tokens, ("memory_usage", "token_capacity")),
    ("max_running_requests", lambda plan: plan.max_running_requests, ("max_running_requests",)),
)


def reported_memory(server_info: dict[str, Any] | None) -> dict[str, Any]:
    """What the server says about its pools (each None when absent)."""
    info = server_info or {}
    states = [s for s in info.get("internal_states") or [] if isinstance(s, dict)]
    usage: dict[str, Any] = next(
        (s["memory_usage"] for s in states if isinstance(s.get("memory_usage"), dict)), {}
    )
    running = info.get("max_running_requests")
    if running is None:
        running = next(
            (
                s.get("effective_max_running_requests_per_dp")
                for s in states
                if s.get("effective_max_running_requests_per_dp") is not None
            ),
            None,
        )
    return {
        "weights_gib": usage.get("weight"),
        "kv_pool_gib": usage.get("kvcache"),
        "pool_tokens": usage.get("token_capacity", info.get("max_total_num_tokens")),
        "max_running_requests": running,
        "graph_gib": round(sum(usage["graph"].values()), 3) if isinstance(usage.get("graph"), dict) else None,
        "startup_available_gib": usage.get("startup_available"),
    }


def compare_with_server(plan: MemoryPlan, server_info: dict[str, Any] | None) -> dict[str, Any]:
    """{predicted, reported, error_pct}: error = (predicted - reported) / reported, per figure the
    server reports."""
    reported = reported_memory(server_info)
    predicted = {label: predict(plan) for label, predict, _ in COMPARED}
    error = {}
    for label in predicted:
        measured = reported.get(label)
        if isinstance(measured, (int, float)) and measured:
            error[label] = round(100 * (predicted[label] - measured) / measured, 2)
    return {
        "card": plan.card,
        "card_source": plan.card_source,
        "verdict": plan.verdict,
        "predicted": predicted,
        "reported": reported,
        "error_pct": error,
        "problems": plan.problems,
        "assumptions": plan.assumptions,
    }
