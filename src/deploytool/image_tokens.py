"""Image tokens the way Qwen's vision processors count them, so usage grows with resolution:
the reference runtime (sim/) charges them, the vision suite expects them of a real server.

The image is resized so both sides are multiples of factor = patch_size x merge_size and its
area lies within [min_pixels, max_pixels] (smart_resize: sglang/srt/multimodal/processors/
qwen_vl.py, the same rule as transformers' Qwen2-VL/Qwen3-VL image processors); each
merge_size x merge_size block of patch_size-pixel patches is one token, and the chat template
wraps the image in <|vision_start|> ... <|vision_end|> (2 more tokens).

Defaults: the Qwen3-VL family's preprocessor_config.json (patch 16, merge 2, shortest_edge
65,536 = min_pixels, longest_edge 16,777,216 = max_pixels), which Qwen3.5/3.6 checkpoints use.
"""

from __future__ import annotations

import math

PATCH_SIZE = 16
MERGE_SIZE = 2
MIN_PIXELS = 65_536
MAX_PIXELS = 16_777_216
MAX_RATIO = 200  # sglang's qwen_vl.py refuses more extreme aspect ratios
WRAPPER_TOKENS = 2  # <|vision_start|> and <|vision_end|>


def smart_resize(
    height: int,
    width: int,
    factor: int = PATCH_SIZE * MERGE_SIZE,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> tuple[int, int]:
    """(height, width) the processor resizes an image to. One copy for the runtime and the
    checker: tests/test_qualify_vision_photos.py pins it to figures worked out from sglang's rule,
    so a mistake here does not pass by agreeing with itself."""
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def image_tokens(
    width: int,
    height: int,
    patch_size: int = PATCH_SIZE,
    merge_size: int = MERGE_SIZE,
    min_pixels: int = MIN_PIXELS,
    max_pixels: int = MAX_PIXELS,
) -> int:
    """Prompt tokens one image of this size costs, wrapper tokens included; a more extreme aspect
    ratio than sglang accepts is refused as it refuses it."""
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {MAX_RATIO}, got {max(height, width) / min(height, width)}"
        )
    h_bar, w_bar = smart_resize(height, width, patch_size * merge_size, min_pixels, max_pixels)
    return (h_bar // patch_size) * (w_bar // patch_size) // (merge_size * merge_size) + WRAPPER_TOKENS
