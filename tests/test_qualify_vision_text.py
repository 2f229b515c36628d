"""vision: the text-reading cases. Against the reference runtime (which cannot read text) they are
reported as skipped cases with the reason; against a stand-in for a real model (a small HTTP
server on loopback that knows the answers) they run, pass, and fail naming the case and the
missing keyword when the answer is wrong. The text images are deterministic and really drawn."""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import serve_app
from PIL import Image, ImageDraw
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from deploytool.checks.targets import Target
from deploytool.qualify import Verdict, run_qualification
from deploytool.qualify.suites import vision
from deploytool.qualify.suites.vision.pictures import SIZE, TEXT_MARGIN, data_url, draw, text_layout
from deploytool.server.facts import ServerFacts
from deploytool.sim import SimSettings, serve_in_thread

SIM_REASON = "the reference runtime cannot read text; docs/sim.md"
CASES = vision.load_cases()
TEXT_CASES = [c["id"] for c in CASES if "text_reading" in (c.get("needs") or [])]
OTHER_CASES = [c["id"] for c in CASES if c["id"] not in TEXT_CASES]


def qualify(url: str, tmp_path: Path, limit: int | None = None):
    return run_qualification(
        Target(url=url, profile=None),
        suites=["vision"],
        limit=limit,
        report_dir=tmp_path / "report",
        # the photo checks have their own tests (test_qualify_vision_photos.py)
        overrides={"preflight": {"ready_timeout_s": 2}, "vision": {"photo_checks": False}},
    )


def test_the_yaml_has_text_cases_and_a_mixed_multi_image_one() -> None:
    assert {"read-text-orchid", "read-text-maple", "multi-image-text-and-shapes"} <= set(TEXT_CASES)
    mixed = next(c for c in CASES if c["id"] == "multi-image-text-and-shapes")
    assert [sorted(spec) for spec in mixed["images"]] == [["text"], ["shapes"]]
    for case in CASES:
        if case["id"] in TEXT_CASES:
            text = next(spec["text"]["value"] for spec in case["images"] if "text" in spec)
            word, number = text.split()
            assert [word.lower()] in case["expect"] and [number] in case["expect"]


# --- against the reference runtime ----------------------------------------------------------------


def test_text_cases_are_skipped_with_the_reason_against_the_sim(tmp_path: Path) -> None:
    settings = SimSettings(
        startup_seconds=0,
        decode_tps=5000,
        prefill_tps=2_000_000,
        log_requests=False,
        default_chat_template_kwargs='{"enable_thinking": false}',
        enable_metrics=True,
        enable_cache_report=True,
    )
    with serve_in_thread(settings, wait_ready=True) as handle:
        report = qualify(handle.url, tmp_path)
    result = report.suite("vision")
    assert result.verdict is Verdict.PASSED, result.reason
    figures = result.figures
    assert figures["cases"] == figures["correct"] == len(OTHER_CASES)
    assert figures["cases_skipped"] == len(TEXT_CASES) == 3
    assert figures["skipped_cases"] == [
        {"case": c, "needs": ["text_reading"], "reason": SIM_REASON} for c in TEXT_CASES
    ]
    assert not set(TEXT_CASES) & {t["case"] for t in result.transcripts}  # never sent, never "passed"
    assert SIM_REASON in result.reason and all(c in result.reason for c in TEXT_CASES)
    assert "reported as skipped" in result.method
    assert report.passed


def test_skip_reason_is_the_simulators_only() -> None:
    case = {"id": "x", "needs": ["text_reading"]}
    assert vision.skip_reason(case, ServerFacts(url="u", server_info={"simulator": True})) == SIM_REASON
    assert (
        vision.skip_reason(case, ServerFacts(url="u", model_info={"model_type": "simulator"})) == SIM_REASON
    )
    assert vision.skip_reason(case, ServerFacts(url="u", server_info={"version": "0.5"})) is None
    assert vision.skip_reason({"id": "y"}, ServerFacts(url="u", server_info={"simulator": True})) is None


def test_an_unknown_need_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "qualify").mkdir()
    (tmp_path / "qualify" / "bad.yaml").write_text(
        "cases:\n  - {id: typo, prompt: p, needs: [text_reeding], images: [{text: {value: A}}], expect: [[a]]}\n"
    )
    monkeypatch.setenv("DEPLOYTOOL_RESOURCES", str(tmp_path))
    with pytest.raises(ValueError, match=r"'typo' needs \['text_reeding'\]"):
        vision.load_cases("bad.yaml")


# --- against a stand-in for a real vision model ---------------------------------------------------


def _key(prompt: str, urls: list[str]) -> tuple[str, tuple[str, ...]]:
    return prompt, tuple(urls)


class StandIn:
    """Answers each case of vision.yaml correctly when it gets exactly that case's images and
    prompt (the answer key comes from the test, as a real model's knowledge would); `wrong`
    replaces the answer of a case. Refuses an undecodable image with a 400. Not the simulator:
    it has no server info at all."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, tuple[str, ...]], str] = {}
        self.ids: dict[tuple[str, tuple[str, ...]], str] = {}
        for case in CASES:
            key = _key(case["prompt"], [data_url(draw(spec)) for spec in case["images"]])
            self.answers[key] = " ".join(group[0] for group in case["expect"]).upper()
            self.ids[key] = case["id"]
        self.wrong: dict[str, str] = {}
        self.seen: list[str] = []

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        parts = body["messages"][-1]["content"]
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        prompt = "".join(p["text"] for p in parts if p["type"] == "text")
        for url in urls:
            try:
                Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1], validate=True))).load()
            except (binascii.Error, OSError, IndexError):
                return JSONResponse(
                    {
                        "object": "error",
                        "message": "cannot decode image",
                        "type": "BadRequestError",
                        "code": 400,
                    },
                    status_code=400,
                )
        key = _key(prompt, urls)
        case = self.ids.get(key, "?")
        self.seen.append(case)
        answer = self.wrong.get(case, self.answers.get(key, "I cannot tell."))
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
                ],
                "usage": {
                    "prompt_tokens": 100 * len(urls) + 20,
                    "completion_tokens": 4,
                    "total_tokens": 100 * len(urls) + 24,
                },
            }
        )


@pytest.fixture(scope="module")
def standin() -> Iterator[tuple[str, StandIn]]:
    model = StandIn()

    async def health(request: Request) -> Response:
        return Response(status_code=200)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "stand-in-vl", "object": "model"}]})

    app = Starlette(
        routes=[
            Route("/health", health),
            Route("/v1/models", models),
            Route("/v1/chat/completions", model.chat, methods=["POST"]),
        ]
    )
    with serve_app(app, "the stand-in server") as url:
        yield url, model


def test_text_cases_run_and_pass_against_a_model_that_reads(
    standin: tuple[str, StandIn], tmp_path: Path
) -> None:
    url, model = standin
    model.wrong.clear()
    model.seen.clear()
    report = qualify(url, tmp_path)
    assert report.server is not None and not report.server.is_simulator
    result = report.suite("vision")
    assert result.verdict is Verdict.PASSED, result.reason
    assert result.figures["cases"] == result.figures["correct"] == len(CASES)
    assert result.figures["cases_skipped"] == 0 and result.figures["skipped_cases"] == []
    assert result.figures["invalid_image_status"] == 400
    assert sorted(c for c in model.seen if c != "?") == sorted(c["id"] for c in CASES)  # each sent once
    assert result.reason == ""


@pytest.mark.parametrize(
    "case, answer, missing",
    [
        ("read-text-orchid", "TULIP 47", "['orchid']"),
        ("read-text-maple", "MAPLE 28", "['82']"),
        ("multi-image-text-and-shapes", "VELVET 15, 4", "['3', 'three']"),
    ],
)
def test_a_wrong_reading_fails_naming_the_case_and_the_keyword(
    standin: tuple[str, StandIn], tmp_path: Path, case: str, answer: str, missing: str
) -> None:
    url, model = standin
    model.wrong.clear()
    model.wrong[case] = answer
    try:
        report = qualify(url, tmp_path)
    finally:
        model.wrong.clear()
    result = report.suite("vision")
    assert result.verdict is Verdict.FAILED
    assert result.figures["failed_cases"] == [case]
    assert result.figures["correct"] == len(CASES) - 1
    assert f"{case}: answer lacks one of {missing}: {answer!r}" in result.reason
    failure = next(t for t in result.transcripts if t["case"] == case)
    assert not failure["passed"] and failure["problems"][0].startswith(f"answer lacks one of {missing}")
    assert report.exit_code == 1


# --- the images ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["ORCHID 47", "MAPLE 82", "VELVET 15", "STOP"])
def test_text_images_are_deterministic_and_drawn(value: str) -> None:
    spec = {"text": {"value": value, "colour": "black"}}
    first = data_url(draw(spec))
    assert data_url(draw(spec)) == first  # same bytes twice
    image = draw(spec)
    assert image.size == (SIZE, SIZE)
    _, _, (left, top, right, bottom) = text_layout(ImageDraw.Draw(image), value)
    margin = SIZE // TEXT_MARGIN
    assert margin <= left < right <= SIZE - margin and 0 <= top < bottom <= SIZE
    assert right - left >= SIZE // 3 and bottom - top >= SIZE // 10  # large text
    pixels = image.load()
    dark = sum(1 for x in range(left, right) for y in range(top, bottom) if sum(pixels[x, y]) < 3 * 128)
    assert dark > 0.1 * (right - left) * (bottom - top)  # the text is really drawn, in black
    outside = [
        pixels[x, y]
        for x in range(SIZE)
        for y in range(SIZE)
        if not (left - 1 <= x <= right and top - 1 <= y <= bottom)
    ]
    assert set(outside) == {(255, 255, 255)}  # and nothing else is


def test_different_text_gives_a_different_image() -> None:
    assert data_url(draw({"text": {"value": "ORCHID 47"}})) != data_url(
        draw({"text": {"value": "ORCHID 48"}})
    )
    black_by_default = draw({"text": {"value": "ORCHID 47"}})
    assert black_by_default.tobytes() == draw({"text": {"value": "ORCHID 47", "colour": "black"}}).tobytes()
