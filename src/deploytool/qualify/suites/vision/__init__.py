"""vision: images drawn by deploytool (known shapes, colours, counts, text) sent as base64 data
URLs, one and two per request; every keyword group of a case must match the answer, usage must
count the tokens, and an invalid image must be refused with a 4xx (not a 200, not a 5xx).

A case may declare `needs: [...]`: abilities beyond seeing shapes and colours (NEEDS). A case
that needs what the server is known to lack (SIMULATOR_LACKS, for deploytool's reference
runtime) is not sent: it is reported as a skipped case with the reason, counted apart from the
cases that ran, never as passed and never failing the suite."""

from __future__ import annotations

import asyncio
from typing import Any

import yaml
from pydantic import Field

from ....resources import resource
from ....server.client import ChatResult
from ....server.facts import ServerFacts
from ...context import SuiteContext, chat_payload
from ...scoring import answer_lacks
from ...suite_api import Gate, SuiteResult, SuiteSettings, Verdict, response_problems
from ...transcripts import TranscriptLog, transcript
from .photos import photo_checks
from .pictures import data_url, draw

name = "vision"
# "not an image" in base64: decodes fine, but is no picture a server can read.
INVALID_IMAGE_URL = "data:image/png;base64,bm90IGFuIGltYWdl"
# What a case may list under `needs:`, beyond seeing shapes and colours.
NEEDS = {"text_reading": "reads text drawn in an image"}
# What deploytool's reference runtime cannot do, and where that is documented.
SIMULATOR_LACKS = {"text_reading": "the reference runtime cannot read text; docs/sim.md"}


class Settings(SuiteSettings):
    max_tokens: int = Field(default=256, ge=1)
    concurrency: int = Field(default=4, ge=1)
    cases_file: str = Field(default="vision.yaml", description="Under the project's qualify/ folder.")
    request_timeout_s: float = 120.0
    # Photographs and resolutions (qualify/suites/vision/photos.py); the image processor's figures default to
    # the Qwen3-VL family's preprocessor_config.json (patch 16, merge 2, 65,536..16,777,216 pixels).
    photo_checks: bool = Field(
        default=True, description="Photographs, resolution ladder, image across turns."
    )
    photo_side: int = Field(default=768, ge=32, description="Longest side of the recognition photos.")
    resolutions: list[int] = Field(
        default=[256, 768, 1536, 3072],
        min_length=1,
        description="Ladder sides; the processor's largest size is added.",
    )
    png_max_side: int = Field(default=1536, ge=32, description="PNG rungs up to this side (JPEG beyond).")
    patch_size: int = Field(default=16, ge=1)
    merge_size: int = Field(default=2, ge=1)
    min_pixels: int = Field(default=65_536, ge=1)
    max_pixels: int = Field(default=16_777_216, ge=1)
    usage_tolerance: float = Field(default=0.01, ge=0, description="Relative slack on the token growth.")


def applies_to(profile: Any, server: ServerFacts) -> str | None:
    if profile is not None and not profile.model.vision:
        return f"profile {profile.name!r} says the model takes no images (model.vision: false)"
    if profile is None and server.has_vision is False:
        return "/model_info says the model takes no images"
    return None


def load_cases(file: str = "vision.yaml") -> list[dict[str, Any]]:
    cases = load_data(file)["cases"]
    for case in cases:
        needs = case.get("needs") or []
        if not isinstance(needs, list):
            raise ValueError(f"qualify/{file}: case {case.get('id')!r}: needs must be a list, got {needs!r}")
        unknown = [n for n in needs if n not in NEEDS]
        if unknown:
            raise ValueError(
                f"qualify/{file}: case {case.get('id')!r} needs {unknown} (known: {sorted(NEEDS)})"
            )
    return cases


def load_data(file: str = "vision.yaml") -> dict[str, Any]:
    return yaml.safe_load(resource("qualify", file).read_text())


def skip_reason(case: dict[str, Any], server: ServerFacts) -> str | None:
    """Why this case cannot be asked of this server (it needs what the server lacks), or None."""
    lacks = SIMULATOR_LACKS if server.is_simulator else {}
    reasons = [lacks[n] for n in case.get("needs") or [] if n in lacks]
    return "; ".join(reasons) or None


async def run(ctx: SuiteContext[Settings]) -> SuiteResult:
    s = ctx.settings
    chosen, limited = ctx.apply_limit(load_cases(s.cases_file))
    skipped = [
        {"case": c["id"], "needs": list(c.get("needs") or []), "reason": reason}
        for c in chosen
        if (reason := skip_reason(c, ctx.server))
    ]
    skipped_ids = {row["case"] for row in skipped}
    cases = [c for c in chosen if c["id"] not in skipped_ids]
    ctx.set_total(len(cases) + 1)
    log = TranscriptLog()
    gate_fail: dict[str, str] = {}  # case id -> its first problem
    usage_fail: list[str] = []
    await asyncio.gather(*(_ask(ctx, case, log, gate_fail, usage_fail) for case in cases))
    bad, refused = await _invalid_image(ctx, log)
    photo_gates, photo_figures, photo_notes = (
        (await photo_checks(ctx, s, load_data(s.cases_file), log, ctx.limit))
        if s.photo_checks
        else ([], {}, [])
    )

    answered = len(cases) - len(gate_fail)
    result = SuiteResult(name=name, verdict=Verdict.ERROR, limited=limited)
    result.figures = {
        "cases": len(cases),
        "correct": answered,
        "usage_ok": len(cases) - len(usage_fail),
        "failed_cases": sorted(gate_fail),
        "cases_skipped": len(skipped),
        "skipped_cases": skipped,
        "invalid_image_status": bad.status,
    }
    result.gates = [
        Gate.all_of(
            "answers with every keyword group",
            answered,
            len(cases),
            detail="; ".join(f"{k}: {v}" for k, v in sorted(gate_fail.items())),
        ),
        Gate.all_of("usage counts prompt and completion tokens", len(cases) - len(usage_fail), len(cases)),
        Gate(
            name="invalid image_url refused with 4xx",
            threshold="4xx",
            measured=bad.status or bad.error,
            passed=refused,
            comparison="in",
        ),
        *photo_gates,
    ]
    result.figures.update(photo_figures)
    result.method = _method(s, cases, skipped, ctx.limit if limited else None)
    result.transcripts = log.items
    result.judge()
    for note in photo_notes:
        result.reason = f"{result.reason}; {note}" if result.reason else note
    if skipped:
        note = (
            f"{len(skipped)} of {len(chosen)} cases skipped ({', '.join(r['case'] for r in skipped)}): "
            + "; ".join(sorted({r["reason"] for r in skipped}))
        )
        result.reason = f"{result.reason}; {note}" if result.reason else note
    return result


async def _ask(
    ctx: SuiteContext[Settings],
    case: dict[str, Any],
    log: TranscriptLog,
    gate_fail: dict[str, str],
    usage_fail: list[str],
) -> None:
    """One drawn case: its answer must hold every keyword group and its usage count tokens."""
    s = ctx.settings
    content: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": data_url(draw(spec))}} for spec in case["images"]
    ]
    content.append({"type": "text", "text": case["prompt"]})
    payload = chat_payload(ctx, [{"role": "user", "content": content}], max_tokens=s.max_tokens)
    res = await ctx.send(payload)
    problems = response_problems(res)
    if not res.error:
        lacks = answer_lacks(res.content, case["expect"])
        if lacks:
            problems.append(lacks)
            gate_fail[case["id"]] = problems[0]
        if not (res.prompt_tokens or 0) > 0 or not (res.completion_tokens or 0) > 0:
            problems.append(f"usage does not count tokens: {res.usage!r}")
            usage_fail.append(case["id"])
    else:
        gate_fail[case["id"]] = problems[0]
    log.add(
        transcript(
            case["id"],
            payload,
            res,
            passed=not problems,
            problems=problems,
            images=len(case["images"]),
            expect=case["expect"],
        )
    )
    ctx.advance()


async def _invalid_image(ctx: SuiteContext[Settings], log: TranscriptLog) -> tuple[ChatResult, bool]:
    """An image the server cannot read must be refused as the client's fault: (the answer, refused with a 4xx)."""
    bad_payload = chat_payload(
        ctx,
        [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": INVALID_IMAGE_URL}},
                    {"type": "text", "text": "What is in this image?"},
                ],
            }
        ],
        max_tokens=16,
    )
    bad = await ctx.client.chat(bad_payload)
    refused = bad.status is not None and 400 <= bad.status < 500
    bad_problem = (
        []
        if refused
        else [
            f"an invalid image_url got {'HTTP ' + str(bad.status) if bad.status else bad.error}, expected a 4xx refusal"
        ]
    )
    log.add(transcript("invalid-image-url", bad_payload, bad, passed=refused, problems=bad_problem))
    ctx.advance()
    return bad, refused


def _method(
    s: Settings, cases: list[dict[str, Any]], skipped: list[dict[str, Any]], limit: int | None
) -> str:
    return (
        f"{len(cases)} cases from qualify/{s.cases_file} (images drawn with pillow, {sum(len(c['images']) for c in cases)} "
        f"in all, sent as base64 PNG data URLs), greedy, max_tokens {s.max_tokens}, {s.concurrency} in flight; "
        "an answer passes when every keyword group matches as a whole word; then one request whose "
        "image_url is base64 of text that is not an image."
        + (f" --limit {limit}." if limit is not None else "")
        + (
            f" {len(skipped)} cases that need what this server lacks were not sent; they are "
            "reported as skipped (skipped_cases), not as passed."
            if skipped
            else ""
        )
        + f" Photographs (qualify/photos/): each as JPEG and PNG at {s.photo_side} px in turn streamed or "
        "not, thinking on or off; a resolution ladder "
        f"{s.resolutions} + the processor's largest size (PNG up to {s.png_max_side}), whose prompt tokens "
        f"must grow as the image processor says (patch {s.patch_size}, merge {s.merge_size}, "
        f"{s.min_pixels}..{s.max_pixels} pixels, tolerance {s.usage_tolerance:.0%} or 4 tokens); an image "
        "asked about again in a second turn without being resent, in all four modes; "
        f"{s.concurrency} image requests in flight."
    )
