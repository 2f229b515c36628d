"""The needle's length search, against counters whose answers are known."""

from __future__ import annotations

import asyncio

from deploytool.qualify.suites.needle.haystack import filler_sentences, insert_at_depth, search_length


def run(measure, target, guess, tolerance=50, max_probes=8):
    return asyncio.run(
        search_length(measure, target, guess=guess, tolerance=tolerance, max_probes=max_probes)
    )


def linear(per_unit: float, overhead: int, limit: int | None = None):
    calls = []

    async def measure(units: int) -> int | None:
        calls.append(units)
        tokens = int(overhead + per_unit * units)
        return None if limit is not None and tokens > limit else tokens

    return measure, calls


def test_converges_from_a_low_guess() -> None:
    measure, calls = linear(per_unit=5.2, overhead=300)
    search = run(measure, 20_000, guess=100)
    assert search.found and 19_950 <= search.tokens <= 20_000
    assert len(calls) <= 4


def test_converges_from_a_high_guess() -> None:
    measure, _calls = linear(per_unit=4.0, overhead=40)
    search = run(measure, 10_000, guess=50_000)
    assert search.found and 9_950 <= search.tokens <= 10_000


def test_refused_probes_shrink_the_prompt() -> None:
    """A server that refuses prompts over 12,000 tokens (no count): the search halves, then fits."""
    measure, calls = linear(per_unit=6.0, overhead=10, limit=12_000)
    search = run(measure, 11_000, guess=40_000, tolerance=100)
    assert search.found and 10_900 <= search.tokens <= 11_000
    assert calls[0] == 40_000


def test_gives_up_after_max_probes_and_says_so() -> None:
    async def never(units: int) -> int | None:
        return None

    search = run(never, 5_000, guess=1_000, max_probes=3)
    assert not search.found and search.units is None
    assert len(search.probes) <= 3


def test_nonlinear_counter_still_lands_in_the_window() -> None:
    async def measure(units: int) -> int:
        return int(units * 5 + (units // 100) ** 1.5)  # grows faster than linear

    search = run(measure, 30_000, guess=1_000, tolerance=150, max_probes=10)
    assert search.found


def test_needle_goes_at_its_depth() -> None:
    hay = filler_sentences(100)
    assert insert_at_depth(hay, "N", 0.0)[0] == "N"
    assert insert_at_depth(hay, "N", 1.0)[-1] == "N"
    assert insert_at_depth(hay, "N", 0.5).index("N") == 50
