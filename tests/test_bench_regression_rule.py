"""The regression rule (bench/regression.py): worse than the threshold AND beyond the measured
spread of both runs; compare prints each ratio with its interval and says when there is no
measured difference."""

from __future__ import annotations

import random

import pytest

from deploytool.bench import build_method
from deploytool.bench.compare import compare_loaded
from deploytool.bench.regression import change
from deploytool.bench.results import SCHEMA, BenchRun, CacheCheck, Figure
from deploytool.bench.stats import bootstrap_ratio


def _samples(mean: float, sd: float, seed: int, repeats: int = 3, n: int = 8) -> list[list[float]]:
    rng = random.Random(seed)
    return [[rng.gauss(mean, sd) for _ in range(n)] for _ in range(repeats)]


def _fig(
    samples: list[list[float]], key: str = "decode_c1_tps", unit: str = "tok/s", better: str = "higher"
) -> Figure:
    values = sorted(v for rep in samples for v in rep)
    return Figure(
        key=key,
        label=key,
        value=values[len(values) // 2],
        unit=unit,
        better=better,
        completed=len(values),
        failed=0,
        samples=samples,
    )


def test_a_clear_slowdown_beyond_the_spread_is_a_regression():
    c = change(_fig(_samples(100, 3, 1)), _fig(_samples(70, 3, 2)))
    assert c.worse_pct == pytest.approx(30, abs=3)
    assert c.high < 1 and not c.no_difference
    regressed, why = c.regression(10)
    assert regressed and "beyond the measured spread" in why


def test_a_slowdown_within_a_wide_spread_is_not():
    # one noisy repeat on each side: the point estimate is 20% worse, the interval spans 1
    before = [[100.0] * 8, [60.0] * 8, [100.0] * 8]
    after = [[80.0] * 8, [100.0] * 8, [60.0] * 8]
    c = change(_fig(before), _fig(after))
    assert c.worse_pct == pytest.approx(20, abs=1)
    assert c.no_difference
    regressed, why = c.regression(10)
    assert not regressed and "within the measured spread" in why


def test_within_the_threshold_is_never_a_regression_however_tight():
    c = change(_fig(_samples(100, 0.1, 1)), _fig(_samples(95, 0.1, 2)))
    assert c.high < 1  # a real 5% difference...
    assert not c.regression(10)[0]  # ...but within the threshold


def test_times_have_a_noise_floor_and_lower_is_better():
    before = _fig(_samples(0.010, 0.0005, 1), key="ttft_c1_s", unit="s", better="lower")
    after = _fig(_samples(0.015, 0.0005, 2), key="ttft_c1_s", unit="s", better="lower")
    c = change(before, after)
    assert c.worse_pct == pytest.approx(50, abs=8) and c.low > 1
    assert not c.regression(25, floor_s=0.02)[0]
    assert c.regression(25, floor_s=0.0)[0]


def test_figures_without_samples_get_the_threshold_alone_and_say_so():
    c = change(
        {"key": "decode_c1_tps", "value": 200.0, "better": "higher"},
        {"key": "decode_c1_tps", "value": 100.0, "better": "higher", "unit": "tok/s"},
    )
    regressed, why = c.regression(25)
    assert regressed and "no per-request samples" in why and c.interval_text() == ""


def test_bootstrap_interval_widens_when_repeats_disagree():
    steady = bootstrap_ratio(_samples(100, 2, 1), _samples(100, 2, 2))
    drifting = bootstrap_ratio(_samples(100, 2, 1), [[100.0] * 8, [80.0] * 8, [120.0] * 8])
    assert steady[1] <= 1 <= steady[2] and drifting[1] <= 1 <= drifting[2]
    assert (drifting[2] - drifting[1]) > 3 * (steady[2] - steady[1])


def _run(figs: list[Figure]) -> BenchRun:
    method = build_method(quick=True).model_dump(mode="json")
    check = CacheCheck(
        reported=False,
        requests=0,
        requests_with_hits=0,
        max_cached_fraction=None,
        allowed_fraction=0.02,
        ok=True,
        message="",
    )
    return BenchRun(
        schema=SCHEMA,
        run_id="r",
        started_at="",
        duration_s=0.0,
        complete=True,
        method=method,
        method_fingerprint="f",
        environment={},
        server={},
        groups=[],
        figures=figs,
        sweep=[],
        cache_check=check,
        prompts_unique=True,
        errors_total=0,
        requests_total=8,
        notes=[],
        requests=[],
    )


def test_compare_prints_ratio_intervals_and_no_difference():
    a = _run(
        [_fig(_samples(100, 3, 1)), _fig(_samples(0.02, 0.002, 3), key="ttft_c1_s", unit="s", better="lower")]
    )
    b = _run(
        [_fig(_samples(70, 3, 2)), _fig(_samples(0.02, 0.002, 4), key="ttft_c1_s", unit="s", better="lower")]
    )
    decode, ttft = compare_loaded([a, b]).rows
    low, high = decode.intervals[1]
    assert low < decode.ratios[1] < high < 1
    assert f"({decode.ratios[1]:.2f}x [{low:.2f}-{high:.2f}])" in decode.change_text(1)
    assert decode.verdict(1) == "worse" and "no difference" not in decode.change_text(1)
    assert (
        ttft.no_difference(1)
        and ttft.change_text(1).endswith("no difference measured")
        and ttft.verdict(1) is None
    )


def test_sampled_gauges_are_shown_side_by_side_with_what_sampling_can_tell_never_as_a_ratio():
    def gauge(value: float) -> Figure:
        return Figure(
            "server_running_requests_peak",
            "server: running requests, highest sample",
            value,
            "",
            "neither",
            0,
            0,
        )

    comparison = compare_loaded([_run([gauge(4.0)]), _run([gauge(1.0)])])
    row = comparison.rows[0]
    assert row.sampled and row.ratios == [None, None]
    assert "x" not in row.change_text(1) and "sampled, not compared" in row.change_text(1)
    note = next(w for w in comparison.warnings if "highest of /metrics reads" in w)
    assert "at least" in note and "missed" in note
