"""Vision as the gateway's traffic uses it: photographs as JPEG and PNG, a resolution ladder up
to the processor's largest size with usage growing as the processor says, an image kept across
turns, all four modes, several requests in flight."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from qualify_helpers import qualify, sim

from deploytool.image_tokens import image_tokens
from deploytool.qualify import Verdict
from deploytool.qualify.suites.vision import Settings
from deploytool.qualify.suites.vision.photos import expected_tokens, largest_side, load_photo


def test_photos_ladder_history_and_concurrency_against_the_sim(tmp_path: Path) -> None:
    with sim() as handle:
        report = qualify(handle.url, tmp_path, suites=["vision"], limit=None)
    vision = report.suite("vision")
    assert vision.verdict is Verdict.PASSED, vision.reason
    figures = vision.figures
    assert len(figures["photos"]) == 8 and {r["format"] for r in figures["photos"]} == {"jpeg", "png"}
    assert len({r["mode"] for r in figures["photos"]}) == 4
    assert not any(r["answer_checked"] for r in figures["photos"])  # the sim cannot recognise photos ...
    assert "8 photo answers not checked: the reference runtime cannot recognise photographs" in vision.reason
    ladder = figures["ladder"]
    jpeg = [r for r in ladder if r["format"] == "jpeg"]
    assert [r["width"] for r in jpeg][:4] == [256, 768, 1536, 3072] and jpeg[-1]["width"] > 4000
    assert all(a["prompt_tokens"] < b["prompt_tokens"] for a, b in itertools.pairwise(jpeg))
    assert all(r["measured_growth"] == r["expected_growth"] for r in ladder)
    assert max(r["width"] for r in ladder if r["format"] == "png") == 1536
    assert [r["passed"] for r in figures["history"]] == [True] * 4
    assert figures["peak_in_flight"] >= 2


def test_a_server_counting_images_another_way_fails_the_growth_gate(tmp_path: Path) -> None:
    # The suite told the model has Qwen2.5-VL's processor (14-pixel patches) while the server
    # counts like Qwen3-VL's: the growth differs and the gate says by how much.
    with sim() as handle:
        report = qualify(
            handle.url,
            tmp_path,
            suites=["vision"],
            limit=1,
            overrides={"vision": {"patch_size": 14, "min_pixels": 3136, "max_pixels": 12_845_056}},
        )
    reason = report.suite("vision").reason
    assert "prompt tokens grow with resolution as the image processor says: measured" in reason
    assert "the image processor says" in reason and "grew by" in reason


def test_expected_tokens_follow_qwens_smart_resize() -> None:
    s = Settings()
    assert expected_tokens(256, 256, s) == 64  # 256 px = 16 patches of 16, 2x2 merged
    assert expected_tokens(100, 100, s) == 64  # below min_pixels: scaled up to 256x256
    assert expected_tokens(8000, 8000, s) == 16_384  # above max_pixels: scaled down to 4096x4096
    # the checker and the runtime share one copy of the rule, so it is pinned to figures worked
    # out by hand from sglang's qwen_vl.py: rounding to multiples of 32, a wide image scaled down
    # into max_pixels, a wide and a tall one scaled up into min_pixels
    # 600x400: round(12.5) = 12 and round(18.75) = 19 blocks of 32 -> 384x608, 24x38 patches / 4
    assert expected_tokens(600, 400, s) == 228 and image_tokens(600, 400) == 230  # + 2 wrappers
    # 9000x3000: 3008x8992 is over max_pixels; beta = sqrt(27e6 / 16,777,216) = 1.2686, floored to
    # multiples of 32: 2336x7072 -> 146x442 patches / 4
    assert expected_tokens(9000, 3000, s) == 16_133
    # 333x31 wide: 32x320 is under min_pixels; beta = sqrt(65,536 / 10,323) = 2.5197, ceiled to
    # multiples of 32: 96x864 -> 6x54 patches / 4
    assert expected_tokens(333, 31, s) == 81 and image_tokens(31, 333) == 83
    with pytest.raises(ValueError, match="aspect ratio"):
        image_tokens(9000, 2)  # sglang refuses a ratio over 200
    coffee = load_photo("coffee.jpg")
    side = largest_side(coffee, s.max_pixels)
    assert coffee.size == (600, 400) and side * side * 2 / 3 <= s.max_pixels
