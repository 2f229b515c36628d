"""SGLang 0.5.23's default `mem-fraction-static`, for a launch that does not set it.

arg_groups/memory_hook.py `handle_gpu_memory_settings` picks, by the card's memory (MiB, as
`get_device_memory_capacity` reports it), a chunked-prefill size and a decode CUDA-graph batch
size, estimates the activation and graph memory from them, and sets

    mem_fraction_static = round((gpu_mem - reserved_mb) / gpu_mem, 3)
    reserved_mb = 512 + max(chunked_prefill_size, 2048) x 1.5 + tp x pp / 8 x 1024
                  + reserve_for_graph_mb (decode max_bs x 2, + 8 a captured prefill size,
                    or 1.5 GiB for an MLA model)
                  (at least 10 GiB on a card over 60 GiB)

then, for a vision-language model, multiplies it by 0.95 x a factor for the vision tower's size
(`adjust_mem_fraction_for_vlm`). Modelled for one node on CUDA, no disaggregation, no DP
attention, no DeepEP, post-capture KV sizing off (its default): the cases deploytool's profiles
use. The planner itself still asks profiles for the flag; this is what a launch without it gets.
"""

from __future__ import annotations

from dataclasses import dataclass

from .checkpoint import ModelShape

# (below this many MiB, chunked_prefill_size, decode max_bs at tp < 4, at tp >= 4)
_CARD_CLASSES = [
    (20 * 1024, 2048, 8, 8),  # T4, 4080
    (35 * 1024, 4096, 48, 160),  # A10, 4090, 5090
    (60 * 1024, 4096, 32, 160),  # A100 40GB, L40
    (90 * 1024, 8192, 256, 512),  # H100, A100 80GB
    (160 * 1024, 8192, 256, 512),  # H20, H200
]
_LARGEST = (16384, 512, 512)  # B200, MI300 and up


@dataclass(frozen=True)
class DefaultFraction:
    value: float
    reserved_mb: float
    chunked_prefill_size: int
    decode_max_bs: int
    prefill_graph_sizes: int
    vlm_factor: float


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """arg_groups/cuda_graph_hook.py `generate_prefill_cuda_graph_batch_sizes`."""
    sizes = (
        list(range(4, 33, 4))
        + list(range(48, 257, 16))
        + list(range(288, 513, 32))
        + list(range(576, 1025, 64))
        + list(range(1280, 4097, 256))
        + list(range(4608, max_bs + 1, 512))
    )
    return [s for s in sizes if s <= max_bs]


def sglang_default_mem_fraction_static(
    gpu_mem_mib: int,
    shape: ModelShape,
    *,
    tp_size: int = 1,
    max_running_requests: int | None = None,
    chunked_prefill_size: int | None = None,
) -> DefaultFraction:
    chunk, bs_small, bs_large = next(
        ((chunk, small, large) for limit, chunk, small, large in _CARD_CLASSES if gpu_mem_mib < limit),
        _LARGEST,
    )
    chunk = chunked_prefill_size or chunk
    max_bs = bs_small if tp_size < 4 else bs_large
    if max_running_requests is not None and max_bs > max_running_requests:
        max_bs = max_running_requests  # the default decode max_bs never exceeds the running requests
    prefill_max = min(8192, chunk) if shape.is_mla else chunk
    sizes = len(prefill_graph_sizes(prefill_max))
    graph = max_bs * 2 + (1.5 * 1024 if shape.is_mla else sizes * 8)
    reserved = 512 + max(chunk, 2048) * 1.5 + tp_size / 8 * 1024 + graph
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    value = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    factor = 1.0
    if shape.multimodal and shape.vision_hidden_size:
        # SGLang reads vision_config.num_hidden_layers with a default of 24: a config that says
        # `depth` instead (Qwen3-VL, Qwen3.5/3.6) is counted as 24 layers.
        layers = shape.vision_num_hidden_layers or 24
        ratio = layers * shape.vision_hidden_size**2 / (24 * 1024**2)
        factor = 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
        value *= factor
    return DefaultFraction(
        value=value,
        reserved_mb=reserved,
        chunked_prefill_size=chunk,
        decode_max_bs=max_bs,
        prefill_graph_sizes=sizes,
        vlm_factor=factor,
    )
