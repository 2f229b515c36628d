"""Regression gates of the performance suite: relative, with an absolute noise floor for times."""

from __future__ import annotations

from types import SimpleNamespace as NS

from deploytool.qualify.suites.performance import regression_gates


def fig(key: str, value: float, unit: str, better: str) -> NS:
    return NS(key=key, label=key, value=value, unit=unit, better=better)


PREVIOUS = {
    "bench_figures": [
        {"key": "decode_c1_tps", "value": 200.0},
        {"key": "ttft_c1_s", "value": 0.011},
        {"key": "ttft_c4_s", "value": 0.300},
    ]
}


def test_relative_regressions_fail_and_improvements_pass():
    bench = NS(
        figures=[fig("decode_c1_tps", 100.0, "tok/s", "higher"), fig("ttft_c4_s", 0.400, "s", "lower")]
    )
    gates = {
        g.name: g for g in regression_gates(bench, PREVIOUS, 25, ["decode_c1_tps", "ttft_c4_s"], floor_s=0.02)
    }
    assert (
        gates["regression: decode_c1_tps"].measured == 50.0 and not gates["regression: decode_c1_tps"].passed
    )
    assert not gates["regression: ttft_c4_s"].passed  # 100 ms worse: above the floor
    faster = NS(figures=[fig("decode_c1_tps", 400.0, "tok/s", "higher")])
    assert regression_gates(faster, PREVIOUS, 25, ["decode_c1_tps"])[0].passed


def test_a_few_milliseconds_of_ttft_are_within_the_noise_floor():
    bench = NS(figures=[fig("ttft_c1_s", 0.016, "s", "lower")])  # +45%, but only 5 ms
    gate = regression_gates(bench, PREVIOUS, 25, ["ttft_c1_s"], floor_s=0.02)[0]
    assert gate.passed and "noise floor" in gate.detail
    strict = regression_gates(bench, PREVIOUS, 25, ["ttft_c1_s"], floor_s=0.0)[0]
    assert not strict.passed
