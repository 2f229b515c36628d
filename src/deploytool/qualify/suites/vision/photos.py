"""The vision suite's photo checks: real photographs (qualify/photos/, public domain or CC0) as
JPEG and PNG, a resolution ladder up to the largest size the model's image processor keeps,
an image kept across turns, streamed and not, thinking on and off, several in flight at once.

Expected image tokens follow the model's image processor (Qwen2-VL/Qwen3-VL's smart_resize,
as sglang/srt/multimodal/processors/qwen_vl.py and transformers implement it): sides rounded to
multiples of patch_size x merge_size within [min_pixels, max_pixels]; one token per merged
block; two wrapper tokens. The settings hold the processor's figures (the Qwen3-VL family's
preprocessor_config.json by default) so another model family sets its own.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from PIL import Image

from ....image_tokens import smart_resize
from ....resources import resource
from ....server.client import ChatResult
from ...context import SuiteContext, chat_payload
from ...scoring import answer_lacks
from ...suite_api import Gate, response_problems
from ...transcripts import TranscriptLog, transcript
from .pictures import data_url, draw

MODES = [(False, False), (True, False), (False, True), (True, True)]  # (stream, thinking)
SIMULATOR_CANNOT = "the reference runtime cannot recognise photographs; docs/sim.md"


def mode_label(stream: bool, thinking: bool) -> str:
    return f"{'stream' if stream else 'non-stream'} thinking-{'on' if thinking else 'off'}"


def expected_tokens(width: int, height: int, s: Any) -> int:
    """Image tokens the processor makes of a width x height image (without the 2 wrapper tokens,
    which cancel in a difference)."""
    h_bar, w_bar = smart_resize(height, width, s.patch_size * s.merge_size, s.min_pixels, s.max_pixels)
    return (h_bar // s.patch_size) * (w_bar // s.patch_size) // (s.merge_size**2)


def load_photo(file: str) -> Image.Image:
    with Image.open(resource("qualify", "photos", file)) as image:
        return image.convert("RGB")


def scaled(image: Image.Image, side: int) -> Image.Image:
    w, h = image.size
    ratio = side / max(w, h)
    return image.resize((max(1, round(w * ratio)), max(1, round(h * ratio))), Image.Resampling.LANCZOS)


def largest_side(image: Image.Image, max_pixels: int) -> int:
    """The longest side of the largest copy of `image` that max_pixels keeps unshrunk."""
    w, h = image.size
    return int(max(w, h) * math.sqrt(max_pixels / (w * h)))


PNG_COMPRESS_LEVEL = 1


def encode(image: Image.Image, fmt: str) -> str:
    buffer = io.BytesIO()
    if fmt == "jpeg":
        image.save(buffer, format="JPEG", quality=90)
    else:
        # zlib's fastest level: the same pixels in 5-10% more bytes, for under a third of the
        # CPU of the default level (6) on these photographs
        image.save(buffer, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return f"data:image/{fmt};base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


@functools.lru_cache(maxsize=16)
def photo_urls(file: str, side: int, formats: tuple[str, ...]) -> tuple[tuple[int, int], Mapping[str, str]]:
    """The photo `file` scaled to `side`: its size, and its data URL in each of `formats`.

    Loading, scaling and encoding give the same bytes every time, so a process does them once
    per photo and side (tests run the suite many times in one process); the default settings
    keep about ten megabytes of URLs here."""
    image = scaled(load_photo(file), side)
    return image.size, MappingProxyType({fmt: encode(image, fmt) for fmt in formats})


def image_message(url: str, text: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}],
    }


class _PhotoRun:
    """One run of the photo, ladder and history checks: their requests share one bound on the
    requests in flight (whose peak is a gate) and one transcript log; each check adds its rows."""

    def __init__(self, ctx: SuiteContext, s: Any, log: TranscriptLog) -> None:
        self.ctx, self.s, self.log = ctx, s, log
        self.flight = ctx.bounded(s.concurrency)  # its own bound, and its peak in flight
        self.recognise = not ctx.server.is_simulator
        self.photo_rows: list[dict[str, Any]] = []
        self.ladder_rows: list[dict[str, Any]] = []
        self.history_rows: list[dict[str, Any]] = []

    async def send(self, payload: dict[str, Any]) -> ChatResult:
        return await self.flight.send(payload)

    async def photo(self, i: int, case: dict[str, Any], fmt: str) -> None:
        stream, thinking = MODES[(2 * i + (fmt == "png")) % len(MODES)]
        _, urls = photo_urls(case["file"], self.s.photo_side, ("jpeg", "png"))
        url = urls[fmt]
        payload = chat_payload(
            self.ctx,
            [image_message(url, case["prompt"])],
            stream=stream,
            thinking=thinking,
            max_tokens=self.s.max_tokens,
        )
        res = await self.send(payload)
        problems = response_problems(res)
        if not res.error and not (res.prompt_tokens or 0) > 0:
            problems.append(f"usage does not count tokens: {res.usage!r}")
        checked = self.recognise and not res.error
        if checked:
            lacks = answer_lacks(res.content, case["expect"])
            if lacks:
                problems.append(lacks)
        self.photo_rows.append(
            {
                "case": case["id"],
                "format": fmt,
                "mode": mode_label(stream, thinking),
                "answer_checked": checked,
                "passed": not problems,
                "problem": problems[0] if problems else "",
            }
        )
        self.log.add(
            transcript(
                f"{case['id']} {fmt} {mode_label(stream, thinking)}",
                payload,
                res,
                passed=not problems,
                problems=problems,
            )
        )

    async def rung(self, ladder: dict[str, Any], side: int, formats: tuple[str, ...], fmt: str) -> None:
        (width, height), urls = photo_urls(ladder["file"], side, formats)
        payload = chat_payload(
            self.ctx, [image_message(urls[fmt], ladder["prompt"])], max_tokens=32, thinking=False
        )
        res = await self.send(payload)
        self.ladder_rows.append(
            {
                "format": fmt,
                "width": width,
                "height": height,
                "expected_image_tokens": expected_tokens(width, height, self.s),
                "prompt_tokens": None if res.error else res.prompt_tokens,
                "error": res.error,
            }
        )
        self.log.add(
            transcript(
                f"ladder {fmt} {width}x{height}",
                payload,
                res,
                passed=not res.error,
                problems=response_problems(res),
            )
        )

    async def conversation(self, history: dict[str, Any], stream: bool, thinking: bool) -> None:
        url = data_url(draw(history["image"]))
        messages: list[dict[str, Any]] = []
        problems: list[str] = []
        for k, step in enumerate(history["turns"]):
            messages.append(
                image_message(url, step["prompt"]) if k == 0 else {"role": "user", "content": step["prompt"]}
            )
            payload = chat_payload(
                self.ctx, list(messages), stream=stream, thinking=thinking, max_tokens=self.s.max_tokens
            )
            res = await self.send(payload)
            found = response_problems(res)
            if not res.error:
                lacks = answer_lacks(res.content, step["expect"])
                if lacks:
                    found.append(f"turn {k + 1} {lacks}")
            self.log.add(
                transcript(
                    f"history turn {k + 1} {mode_label(stream, thinking)}",
                    payload,
                    res,
                    passed=not found,
                    problems=found,
                )
            )
            problems += found
            if found:
                break
            messages.append({"role": "assistant", "content": res.content})
        self.history_rows.append(
            {
                "mode": mode_label(stream, thinking),
                "passed": not problems,
                "problem": problems[0] if problems else "",
            }
        )

    def gates(self, jobs: int) -> tuple[list[Gate], list[str]]:
        s = self.s
        gates: list[Gate] = []
        notes: list[str] = []
        if self.photo_rows:
            failed = [r for r in self.photo_rows if not r["passed"]]
            gates.append(
                Gate.all_of(
                    "photos answered (JPEG and PNG, every mode)",
                    len(self.photo_rows) - len(failed),
                    len(self.photo_rows),
                    detail="; ".join(
                        f"{r['case']} {r['format']} {r['mode']}: {r['problem']}" for r in failed[:3]
                    ),
                )
            )
            if not self.recognise:
                notes.append(f"{len(self.photo_rows)} photo answers not checked: {SIMULATOR_CANNOT}")
        growth = ladder_problems(self.ladder_rows, s)
        if self.ladder_rows:
            gates.append(
                Gate.all_of(
                    "prompt tokens grow with resolution as the image processor says",
                    len(self.ladder_rows) - len(growth),
                    len(self.ladder_rows),
                    detail="; ".join(growth[:3]),
                )
            )
        if self.history_rows:
            failed = [r for r in self.history_rows if not r["passed"]]
            gates.append(
                Gate.all_of(
                    "image kept across turns",
                    len(self.history_rows) - len(failed),
                    len(self.history_rows),
                    detail="; ".join(f"{r['mode']}: {r['problem']}" for r in failed[:2]),
                )
            )
        if jobs > 1 and s.concurrency > 1:
            gates.append(Gate.at_least("image requests in flight at once", self.flight.peak, 2))
        return gates, notes

    def figures(self) -> dict[str, Any]:
        s = self.s
        return {
            "photos": self.photo_rows,
            "ladder": sorted(self.ladder_rows, key=lambda r: (r["format"], r["width"])),
            "history": self.history_rows,
            "peak_in_flight": self.flight.peak,
            "image_processor": {
                "patch_size": s.patch_size,
                "merge_size": s.merge_size,
                "min_pixels": s.min_pixels,
                "max_pixels": s.max_pixels,
            },
        }


async def photo_checks(
    ctx: SuiteContext, s: Any, data: dict[str, Any], log: TranscriptLog, limit: int | None
) -> tuple[list[Gate], dict[str, Any], list[str]]:
    """(gates, figures, notes) of the photo, ladder and history checks."""
    run = _PhotoRun(ctx, s, log)
    photos = list(data.get("photos") or [])[: limit or None]
    jobs = [run.photo(i, c, fmt) for i, c in enumerate(photos) for fmt in ("jpeg", "png")]
    ladder = data.get("ladder") or {}
    if ladder:
        base = load_photo(ladder["file"])
        sides = sorted(set(s.resolutions) | {largest_side(base, s.max_pixels)})
        for side in sides:
            formats = ("jpeg", "png") if side <= s.png_max_side else ("jpeg",)
            jobs += [run.rung(ladder, side, formats, fmt) for fmt in formats]
    history = data.get("history") or {}
    if history:
        jobs += [run.conversation(history, stream, thinking) for stream, thinking in MODES]
    await asyncio.gather(*jobs)
    gates, notes = run.gates(len(jobs))
    return gates, run.figures(), notes


def ladder_problems(rows: list[dict[str, Any]], s: Any) -> list[str]:
    """Each rung's prompt tokens minus the smallest rung's (same format, same text) must equal
    the difference of the processor's image tokens, within usage_tolerance."""
    problems = []
    for fmt in ("jpeg", "png"):
        mine = sorted((r for r in rows if r["format"] == fmt), key=lambda r: r["width"])
        if not mine:
            continue
        base = mine[0]
        for row in mine:
            if row["error"] or row["prompt_tokens"] is None or base["prompt_tokens"] is None:
                problems.append(
                    f"{fmt} {row['width']}x{row['height']}: {row['error'] or base['error'] or 'no usage'}"
                )
                continue
            want = row["expected_image_tokens"] - base["expected_image_tokens"]
            got = row["prompt_tokens"] - base["prompt_tokens"]
            row["measured_growth"], row["expected_growth"] = got, want
            if abs(got - want) > max(4, s.usage_tolerance * want):
                problems.append(
                    f"{fmt} {row['width']}x{row['height']}: prompt tokens grew by {got} over "
                    f"{base['width']}x{base['height']}, the image processor says {want}"
                )
    return problems
