"""Vision as the gateway's traffic uses it: photographs as JPEG and PNG, a resolution ladder up
to the processor's largest size with usage growing as the processor says, an image kept across
turns, all four modes, several requests in flight."""

from __future__ import annotations

from pathlib import Path

from deploytool.qualify import Verdict
from deploytool.qualify.suites.vision.photos import expected_tokens, largest_side, load_photo
from deploytool.qualify.suites.vision import Settings
from deploytool.sim.image_tokens import image_tokens
from qualify_helpers import qualify, sim


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
    assert all(a["prompt_tokens"] < b["prompt_tokens"] for a, b in zip(jpeg, jpeg[1:]))
    assert all(r["measured_growth"] == r["expected_growth"] for r in ladder)
    assert max(r["width"] for r in ladder if r["format"] == "png") == 1536
    assert [r["passed"] for r in figures["history"]] == [True] * 4
    assert figures["peak_in_flight"] >= 2


def test_a_server_counting_images_another_way_fails_the_growth_gate(tmp_path: Path) -> None:
    # The suite told the model has Qwen2.5-VL's processor (14-pixel patches) while the server
    # counts like Qwen3-VL's: the growth differs and the gate says by how much.
    with sim() as handle:
        report = qualify(handle.url, tmp_path, suites=["vision"], limit=1,
                         overrides={"vision": {"patch_size": 14, "min_pixels": 3136, "max_pixels": 12_845_056}})
    reason = report.suite("vision").reason
    assert "prompt tokens grow with resolution as the image processor says: measured" in reason
    assert "the image processor says" in reason and "grew by" in reason


def test_expected_tokens_follow_qwens_smart_resize() -> None:
    s = Settings()
    assert expected_tokens(256, 256, s) == 64  # 256 px = 16 patches of 16, 2x2 merged
    assert expected_tokens(100, 100, s) == 64  # below min_pixels: scaled up to 256x256
    assert expected_tokens(8000, 8000, s) == 16_384  # above max_pixels: scaled down to 4096x4096
    assert expected_tokens(600, 400, s) + 2 == image_tokens(600, 400)  # the sim counts the same, + 2 wrappers
    # the checker and the runtime keep their own copies of the rule (one shared copy would agree
    # with its own mistakes): they must count alike over small, large, wide and tall images
    for width in (1, 28, 100, 333, 1024, 4000, 9000):
        for height in (2, 31, 640, 2048, 8191):
            if max(width, height) / min(width, height) <= 200:
                assert expected_tokens(width, height, s) + 2 == image_tokens(width, height), (width, height)
    coffee = load_photo("coffee.jpg")
    side = largest_side(coffee, s.max_pixels)
    assert coffee.size == (600, 400) and side * side * 2 / 3 <= s.max_pixels
