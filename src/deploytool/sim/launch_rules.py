"""How the reference runtime's speed and pool answer its launch flags (docs/sim.md, "Launch
flags and speed"), so that a search over launches (`deploytool tune`) has a known optimum.

Each rule stands for one effect a real SGLang server shows, reduced to arithmetic a test can
work out by hand:

* the KV pool from the memory fraction: SGLang sizes its pool from what `mem-fraction-static`
  leaves after the weights (model_executor/pool_configurator.py); here
  pool = (gpu_memory_gib x fraction - weights_gib) GiB / kv_bytes_per_token, and a fraction that
  leaves no pool, or too little slack for what a start needs beside the pool (a workspace, each
  captured decode batch size's graph, the largest chunk's activations: edge_rule.py, the rule
  the memory planner and tune's pruning apply), fails the start as SGLang's does;
* CUDA graphs: a decode batch no larger than `cuda-graph-max-bs` replays a captured graph; a
  larger one (or any, with `--disable-cuda-graph`) runs eager, slower by `eager_decode_factor`;
* speculative decoding (EAGLE chain): `k` draft steps, each draft token accepted with chance
  `spec_accept_rate`, give 1 + a + ... + a^k tokens per verify step, and a step costs
  1 + draft_cost x k + verify_cost x k x running (the draft steps, and verifying k extra tokens of
  every running request): a win at low concurrency that turns into a loss as the batch grows.
"""

from __future__ import annotations

import math
from typing import Any

from ..edge_rule import describe_items, sim_beside_pool, sim_max_fraction

GIB = 1 << 30


def memory_model_on(s: Any) -> bool:
    return s.gpu_memory_gib is not None and s.mem_fraction_static is not None


def pool_tokens(s: Any) -> int | None:
    """KV pool tokens by the memory rule; None when the memory model is off."""
    if not memory_model_on(s):
        return None
    budget = s.gpu_memory_gib * s.mem_fraction_static - s.weights_gib
    return max(0, math.floor(budget * GIB / s.kv_bytes_per_token))


def start_failure(s: Any) -> str | None:
    """Why this launch cannot start (SGLang's own words where it has them); None when it can."""
    if not memory_model_on(s):
        return None
    if (pool_tokens(s) or 0) < 1:
        return (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"(weights {s.weights_gib} GiB, {s.gpu_memory_gib} GiB x {s.mem_fraction_static})"
        )
    slack = s.gpu_memory_gib * (1.0 - s.mem_fraction_static)
    items = beside_pool(s)
    need = sum(i.bytes for i in items) / GIB
    if items and slack < need:
        return (
            f"torch.OutOfMemoryError: CUDA out of memory while capturing CUDA graphs: "
            f"{slack:.2f} GiB left outside the static pool, {need:.2f} GiB needed ({describe_items(items)}); "
            f"the highest mem-fraction-static that starts is {sim_max_fraction(s.gpu_memory_gib, items)}"
        )
    return None


def beside_pool(s: Any) -> list:
    """What a start needs beside the pool, by the rule the memory planner applies (edge_rule.py)."""
    return sim_beside_pool(
        activation_gib=s.activation_gib,
        graph_mib_per_bs=s.graph_mib_per_bs,
        chunk_mib_per_token=s.chunk_mib_per_token,
        cuda_graph_max_bs=s.cuda_graph_max_bs,
        disable_cuda_graph=s.disable_cuda_graph,
        chunked_prefill_size=s.chunked_prefill_size,
        speculative=speculative_on(s),
    )


def speculative_on(s: Any) -> bool:
    return s.spec_accept_rate > 0


def draft_steps(s: Any) -> int:
    steps = s.speculative_num_steps if s.speculative_num_steps is not None else 3
    if s.speculative_num_draft_tokens is not None:
        steps = min(steps, s.speculative_num_draft_tokens - 1)
    return max(0, steps)


def accept_length(s: Any) -> float:
    """Expected tokens per verify step of a chain of k draft tokens: 1 + a + ... + a^k."""
    a, k = s.spec_accept_rate, draft_steps(s)
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def graphed(s: Any, running: int) -> bool:
    return not s.disable_cuda_graph and (s.cuda_graph_max_bs is None or running <= s.cuda_graph_max_bs)


def step_factor(s: Any, running: int) -> float:
    """Multiplier on one request's decode speed with `running` requests in the batch."""
    factor = 1.0 if graphed(s, running) else s.eager_decode_factor
    if speculative_on(s):
        k = draft_steps(s)
        factor *= accept_length(s) / (1.0 + s.spec_draft_cost * k + s.spec_verify_cost * k * max(1, running))
    return factor


def problems(s: Any) -> list[str]:
    out = []
    if not 0.0 <= s.spec_accept_rate <= 1.0:
        out.append("spec_accept_rate must be in [0, 1]")
    if s.eager_decode_factor <= 0 or s.spec_draft_cost < 0 or s.spec_verify_cost < 0:
        out.append("eager_decode_factor must be > 0, spec_draft_cost and spec_verify_cost >= 0")
    if s.cuda_graph_max_bs is not None and s.cuda_graph_max_bs < 1:
        out.append("cuda_graph_max_bs must be >= 1")
    if s.speculative_num_draft_tokens is not None and s.speculative_num_draft_tokens < 2:
        out.append("speculative_num_draft_tokens must be >= 2")
    if s.gpu_memory_gib is not None and (
        s.gpu_memory_gib <= 0 or s.kv_bytes_per_token < 1 or s.weights_gib < 0
    ):
        out.append("gpu_memory_gib must be > 0, kv_bytes_per_token >= 1, weights_gib >= 0")
    if s.mem_fraction_static is not None and not 0.0 < s.mem_fraction_static < 1.0:
        out.append("mem_fraction_static must be in (0, 1)")
    return out


def resolve(s: Any) -> None:
    """Fill what the rules derive: the pool (capped by --max-total-tokens when given, as
    SGLang's) and the accept length reported with the speculative rule on."""
    pool = pool_tokens(s)
    if pool is not None and pool > 0:
        s.max_total_tokens = min(pool, s.max_total_tokens) if "max_total_tokens" in s.given else pool
    if speculative_on(s):
        s.spec_accept_length = round(accept_length(s), 4)
