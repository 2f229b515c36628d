"""The launch settings that size SGLang's memory pools, as the planner takes them: its own
module so that the planner and the pieces it calls (linear_state, weights) can all read them
without importing the planner back."""

from __future__ import annotations

from dataclasses import dataclass, field

from .cards import MIB

VLM_CACHE_BYTES = 100 * MIB  # environ.py SGLANG_VLM_CACHE_SIZE_MB default


@dataclass
class PlanInputs:
    """The launch settings that size the pools (SGLang's flag names, as in server.args)."""

    context_length: int
    mem_fraction_static: float
    kv_cache_dtype: str = "auto"
    max_running_requests: int | None = None
    tp_size: int = 1
    page_size: int = 1
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int | None = None
    mamba_ssm_dtype: str | None = None
    max_total_tokens: int | None = None
    max_mamba_cache_size: int | None = None
    mamba_full_memory_ratio: float | None = None
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    mamba_radix_cache_strategy: str = "auto"
    linear_attn_backend: str = "triton"
    enable_linear_replayssm_spec: bool = False
    linear_replayssm_cache_len: int = 16
    vlm_cache_bytes: int = VLM_CACHE_BYTES
    # the SGLang release the launch will run (the profile's image.runtime_version): where a rule
    # the planner models differs between releases, that release's (releases.py)
    runtime_version: str | None = None
    # what sizes the memory beside the pool (upper_edge.py): None where SGLang picks by the card
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    speculative_num_steps: int | None = None
    # the parallel sizes, checked against the plan's cards (parallel.py)
    pp_size: int = 1
    dp_size: int = 1
    ep_size: int = 1
    enable_dp_attention: bool = False
    # the profile's own demands (qualify.preflight)
    min_running_requests: int = 1
    require_full_context_kv: bool = True
    # memory effects of the image's patches that this launch turns on (patch_effects.EFFECTS),
    # and the patches the plan assumed, each as "name: what it changes"
    patch_effects: frozenset[str] = frozenset()
    patches: list[str] = field(default_factory=list)

    @property
    def speculative(self) -> str | None:
        """The speculative algorithm in SGLang's capitals, None when the launch has none (unset
        or NONE)."""
        algo = (self.speculative_algorithm or "").upper()
        return None if algo in ("", "NONE") else algo
