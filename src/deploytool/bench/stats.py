"""The formulas, in one place (docs/bench.md quotes them). Every figure is computed from the raw
per-request records, over completed requests only, so results.json can be recomputed by hand.

    ttft            = first token chunk (reasoning or answer) - request start
    ttfa            = first answer (content / tool-call) chunk - request start
    decode tok/s    = (output tokens - 1) / (last token chunk - first token chunk)
    prefill tok/s   = prompt tokens / ttft
    aggregate tok/s = sum of output tokens of completed requests / (last end - first start)
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence

from .results import GroupSummary, RequestRecord


def median(values: Iterable[float | None]) -> float | None:
    data = [v for v in values if v is not None]
    return statistics.median(data) if data else None


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """Linear-interpolated percentile, q in [0, 100] (numpy's default method)."""
    data = sorted(v for v in values if v is not None)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def ttft(rec: RequestRecord) -> float | None:
    return None if rec.first_token is None else rec.first_token - rec.start


def ttfa(rec: RequestRecord) -> float | None:
    return None if rec.first_answer is None else rec.first_answer - rec.start


def decode_tps(rec: RequestRecord) -> float | None:
    """(output tokens - 1) / (last token - first token): the first token is prefill's."""
    if not rec.ok or rec.output_tokens is None or rec.output_tokens < 2:
        return None
    if rec.first_token is None or rec.last_token is None:
        return None
    span = rec.last_token - rec.first_token
    return (rec.output_tokens - 1) / span if span > 0 else None


def prefill_tps(rec: RequestRecord) -> float | None:
    t = ttft(rec)
    tokens = rec.prompt_tokens if rec.prompt_tokens is not None else rec.prompt_tokens_estimated
    if not rec.ok or not t or t <= 0 or not tokens:
        return None
    return tokens / t


def aggregate_output_tps(records: Sequence[RequestRecord]) -> float | None:
    """Output tokens of completed requests over the group's wall-clock window (failed requests'
    time stays in the window: a server that fails requests does not look faster for it)."""
    if not records:
        return None
    window = max(r.end for r in records) - min(r.start for r in records)
    tokens = sum(r.output_tokens or 0 for r in records if r.ok)
    return tokens / window if window > 0 and tokens else None


def summarize(name: str, phase: str, concurrency: int, records: Sequence[RequestRecord]) -> GroupSummary:
    done = [r for r in records if r.ok]
    errors = Counter(_error_kind(r.error) for r in records if not r.ok)
    decode = [decode_tps(r) for r in done]
    ttfts = [ttft(r) for r in done]
    return GroupSummary(
        name=name,
        phase=phase,
        concurrency=concurrency,
        requests=len(records),
        completed=len(done),
        failed=len(records) - len(done),
        errors=dict(errors),
        window_s=(max(r.end for r in records) - min(r.start for r in records)) if records else 0.0,
        aggregate_output_tps=aggregate_output_tps(records),
        decode_tps_median=median(decode),
        decode_tps_p10=percentile(decode, 10),
        decode_tps_p90=percentile(decode, 90),
        ttft_median_s=median(ttfts),
        ttft_p90_s=percentile(ttfts, 90),
        ttfa_median_s=median(ttfa(r) for r in done),
        prefill_tps_median=median(prefill_tps(r) for r in done),
        prompt_tokens_median=median(r.prompt_tokens for r in done),
        output_tokens_median=median(r.output_tokens for r in done),
        reasoning_tokens_median=median(r.reasoning_tokens for r in done),
        answer_tokens_median=median(r.answer_tokens for r in done),
        cached_tokens_max=max((r.cached_tokens for r in done if r.cached_tokens is not None), default=None),
    )


def _error_kind(error: str | None) -> str:
    """Group error messages by kind ('HTTP 500', 'stream dropped', 'timed out', ...)."""
    text = (error or "unknown error").strip()
    if text.startswith("HTTP "):
        return text.split(":", 1)[0]
    if text.startswith("stream ended without [DONE]"):
        return "stream ended without [DONE]"
    if text.startswith(("stream dropped", "response dropped")):
        return "stream dropped"
    if text.startswith("timed out"):
        return "timed out"
    return text.split(":", 1)[0][:80]


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (higher is better on both)."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(
            (ox >= x and oy >= y) and (ox > x or oy > y) for j, (ox, oy) in enumerate(points) if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


# --- inter-token latency -------------------------------------------------------------------
def itls(rec: RequestRecord) -> list[float]:
    """Gaps between successive token-bearing chunks (the first chunk's wait is TTFT, not ITL).
    Chunks that arrived in one network read share a time, so their gap is 0."""
    if not rec.ok or len(rec.chunk_offsets) < 2:
        return []
    offs = rec.chunk_offsets
    return [offs[i] - offs[i - 1] for i in range(1, len(offs))]


def tpot(rec: RequestRecord) -> float | None:
    """Time per output token after the first: the inverse of decode_tps."""
    speed = decode_tps(rec)
    return None if not speed else 1.0 / speed


def itl_summary(records: Sequence[RequestRecord]) -> dict[str, float | None]:
    gaps = [g for r in records for g in itls(r)]
    return {
        "itl_p50_s": percentile(gaps, 50),
        "itl_p95_s": percentile(gaps, 95),
        "itl_p99_s": percentile(gaps, 99),
        "itl_max_s": max(gaps) if gaps else None,
        "tpot_median_s": median(tpot(r) for r in records if r.ok),
    }


# --- intervals -----------------------------------------------------------------------------
BOOTSTRAP_ITERATIONS = 2000
CONFIDENCE = 0.95


def bootstrap_ratio(
    before: Sequence[Sequence[float]],
    after: Sequence[Sequence[float]],
    *,
    iterations: int = BOOTSTRAP_ITERATIONS,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> tuple[float, float, float] | None:
    """Ratio of medians (after / before) and its percentile-bootstrap interval.

    Each side is a list of repeats, each repeat a list of per-request values (a figure measured
    once per repeat, such as an aggregate, is a one-value list per repeat). Two levels are
    resampled: repeats with replacement, then requests within each chosen repeat, so the
    interval widens both when requests scatter and when repeats disagree (a host that was busy
    during one repeat). With a single repeat per side only requests are resampled."""
    import numpy as np

    a = [np.asarray([v for v in rep if v is not None], dtype=float) for rep in before]
    b = [np.asarray([v for v in rep if v is not None], dtype=float) for rep in after]
    a, b = [x for x in a if x.size], [x for x in b if x.size]
    if not a or not b:
        return None
    point_a = float(np.median(np.concatenate(a)))
    point_b = float(np.median(np.concatenate(b)))
    if point_a == 0:
        return None
    rng = np.random.default_rng(seed)

    def draws(side: list) -> np.ndarray:
        # vectorised: each of the len(side) slots picks a repeat, then that repeat's size in
        # values from it (padding with NaN to the longest repeat), and the pooled median is taken
        sizes = np.asarray([rep.size for rep in side])
        padded = np.full((len(side), sizes.max()), np.nan)
        for j, rep in enumerate(side):
            padded[j, : rep.size] = rep
        cols = np.arange(sizes.max())
        blocks = []
        for _ in range(len(side)):
            reps = (
                np.zeros(iterations, dtype=int) if len(side) == 1 else rng.integers(0, len(side), iterations)
            )
            n = sizes[reps][:, None]
            idx = np.floor(rng.random((iterations, sizes.max())) * n).astype(int)
            values = padded[reps[:, None], idx]
            values[cols[None, :] >= n] = np.nan
            blocks.append(values)
        return np.nanmedian(np.concatenate(blocks, axis=1), axis=1)

    da, db = draws(a), draws(b)
    ok = da != 0
    ratios = db[ok] / da[ok]
    if ratios.size == 0:
        return None
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return point_b / point_a, float(lo), float(hi)


def spread(values: Iterable[float | None]) -> tuple[float, float] | None:
    data = [v for v in values if v is not None]
    return (min(data), max(data)) if data else None
