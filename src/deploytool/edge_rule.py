"""The memory a start needs beside SGLang's static pool, and the highest `mem-fraction-static`
that leaves room for it: the one rule the memory planner (memory/upper_edge.py), the reference
runtime (sim/launch_rules.py) and tune's pruning (tune/prune.py) all apply, so that what the
plan refuses is what the runtime would die of.

SGLang sizes its static pool (weights + KV + state) as `mem_fraction_static` of the memory it
found before loading, `pre_model_load_memory` (mem_cache/kv_cache_configurator.py
`_profile_available_bytes`); everything else the server allocates afterwards must fit in the
rest, `pre_model_load_memory x (1 - mem_fraction_static)`: the CUDA graphs of each captured
decode batch size, the activations of the largest prefill chunk, the attention backend's and
the graph runners' buffers, NCCL's with several cards. A fraction whose rest is smaller dies
of CUDA out-of-memory after the pool is allocated (while capturing, or at the first long
prompt). Pure arithmetic, no imports from the rest of deploytool (the reference runtime
imports only the foundation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MIB = 1 << 20
GIB = 1 << 30

# where a figure comes from, as the plan says it
SGLANG_RULE = "SGLang's rule"
MEASURED = "measured"
ESTIMATE = "estimate"


@dataclass(frozen=True)
class BesideItem:
    """One thing a start allocates outside the static pool, per GPU."""

    what: str
    bytes: float
    source: str  # SGLANG_RULE, MEASURED or ESTIMATE
    where: str  # the SGLang path, the measured table, or how it is estimated

    def as_dict(self) -> dict:
        return {
            "what": self.what,
            "gib": round(self.bytes / GIB, 3),
            "source": self.source,
            "where": self.where,
        }


def decode_capture_sizes(max_bs: int, *, speculative: bool) -> list[int]:
    """server_args.py `_generate_decode_cuda_graph_batch_sizes` (0.5.17 and 0.5.23 alike): the
    decode batch sizes SGLang captures a CUDA graph for, up to `max_bs`."""
    if max_bs < 1:
        return []
    if speculative:
        sizes = (
            list(range(1, 9))
            + list(range(10, 33, 2))
            + list(range(40, 65, 4))
            + list(range(72, 257, 8))
            + list(range(272, max_bs + 1, 16))
        )
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    sizes = [s for s in sizes if s <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def highest_fraction(
    slack_left: Callable[[float], float], *, lo: float = 0.0, hi: float = 0.999, step: float = 0.001
) -> float | None:
    """The highest fraction, on SGLang's three-decimal grid, at which `slack_left(fraction)` (the
    bytes the rest leaves once everything beside the pool is allocated) is not negative; None
    when none is. `slack_left` falls as the fraction rises (the rest shrinks, and what grows with
    the pool grows), so a bisection finds it."""
    per = round(1 / step)  # fractions as n / per: 950 / 1000 is 0.95, 950 x 0.001 is not
    n_lo, n_hi = round(lo * per), round(hi * per)
    if slack_left(n_lo / per) < 0:
        return None
    if slack_left(n_hi / per) >= 0:
        return n_hi / per
    while n_hi - n_lo > 1:
        mid = (n_lo + n_hi) // 2
        if slack_left(mid / per) >= 0:
            n_lo = mid
        else:
            n_hi = mid
    return n_lo / per


# -- the reference runtime's rule: the same structure on the numbers it is given -------------------


def sim_beside_pool(
    *,
    activation_gib: float | None,
    graph_mib_per_bs: float,
    chunk_mib_per_token: float,
    cuda_graph_max_bs: int | None,
    disable_cuda_graph: bool,
    chunked_prefill_size: int | None,
    speculative: bool,
) -> list[BesideItem]:
    """What the reference runtime needs beside its pool: a fixed workspace (`--activation-gib`),
    each captured decode batch size's graph (`--graph-mib-per-bs` x the batch size, summed over
    SGLang's capture list up to `--cuda-graph-max-bs`) and the largest chunk's activations
    (`--chunk-mib-per-token` x `--chunked-prefill-size`)."""
    items = []
    if activation_gib:
        items.append(
            BesideItem(
                "workspace (--activation-gib)", activation_gib * GIB, MEASURED, "the runtime's setting"
            )
        )
    if graph_mib_per_bs and not disable_cuda_graph and cuda_graph_max_bs:
        sizes = decode_capture_sizes(cuda_graph_max_bs, speculative=speculative)
        items.append(
            BesideItem(
                f"decode CUDA graphs ({len(sizes)} batch sizes up to {cuda_graph_max_bs})",
                graph_mib_per_bs * sum(sizes) * MIB,
                MEASURED,
                "--graph-mib-per-bs x each batch size",
            )
        )
    if chunk_mib_per_token and chunked_prefill_size:
        items.append(
            BesideItem(
                f"activations of a {chunked_prefill_size:,}-token chunk",
                chunk_mib_per_token * chunked_prefill_size * MIB,
                MEASURED,
                "--chunk-mib-per-token x --chunked-prefill-size",
            )
        )
    return items


def sim_max_fraction(gpu_memory_gib: float, items: list[BesideItem]) -> float | None:
    """The reference runtime's edge: its rest is the card's GiB x (1 - fraction)."""
    need = sum(i.bytes for i in items)
    return highest_fraction(lambda f: gpu_memory_gib * GIB * (1 - f) - need)


def describe_items(items: list[BesideItem]) -> str:
    return ", ".join(f"{i.what} {i.bytes / GIB:.2f} GiB" for i in items) or "nothing"
