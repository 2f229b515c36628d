"""The figures `top` shows, from two scrapes: the real SGLang server's recorded /metrics and
synthetic expositions whose answers are worked out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from deploytool.monitor.figures import FIGURES, KEYS, Scrape, figures, quantile
from deploytool.server.facts import parse_prometheus, parse_series

REAL = Path(__file__).parent / "data" / "sglang-real"


def _body(folder: str, name: str) -> str:
    return json.loads((REAL / folder / f"{name}.json").read_text())["body"]


def test_series_keep_labels_and_the_summed_parser_still_agrees() -> None:
    text = (
        'a_bucket{x="1\\"}, y",le="0.1"} 3\n'
        'a_bucket{x="2",le="0.1"} 4\n'
        "b 5\n"
        'broken{x="1" 9\n'
        'c{x="1"} notanumber\n'
    )
    series = parse_series(text)
    assert series == [
        ("a_bucket", {"x": '1"}, y', "le": "0.1"}, 3.0),
        ("a_bucket", {"x": "2", "le": "0.1"}, 4.0),
        ("b", {}, 5.0),
    ]
    assert parse_prometheus(text) == {"a_bucket": 7.0, "b": 5.0}


@pytest.mark.parametrize("folder", ["dense", "hybrid-mtp", "a3b"])
def test_recorded_real_server_window(folder: str) -> None:
    """Before and after the harness's whole run of the real 0.5.17 server: every counter grew,
    so every rate is positive; the quantiles fall inside the histogram's bounds and p50 <= p99."""
    before = Scrape.of_text(_body(folder, "metrics_before"), at=0.0)
    after = Scrape.of_text(_body(folder, "metrics_after"), at=100.0)
    f = figures(before, after)
    assert f.why is None
    counters = parse_prometheus(_body(folder, "metrics_after"))
    start = parse_prometheus(_body(folder, "metrics_before"))
    requests = counters["sglang:num_requests_total"] - start.get("sglang:num_requests_total", 0.0)
    assert f.get("requests_per_s") == pytest.approx(requests / 100.0)
    assert f.get("output_tps") > 0 and f.get("input_tps") > 0
    for prefix in ("ttft", "tpot"):
        p50, p99 = f.get(f"{prefix}_p50_s"), f.get(f"{prefix}_p99_s")
        assert p50 is not None and p99 is not None and 0 < p50 <= p99 <= 400
    assert f.get("running") == 0 and f.get("queued") == 0  # recorded after the run: idle
    assert 0 <= f.get("kv_use") <= 1
    assert set(f.values) == set(KEYS)


def test_recorded_mtp_server_has_an_accept_length_and_the_dense_one_none() -> None:
    def window(folder: str):
        return figures(
            Scrape.of_text(_body(folder, "metrics_before"), 0.0),
            Scrape.of_text(_body(folder, "metrics_after"), 10.0),
        )

    mtp = window("hybrid-mtp")
    after, before = (
        parse_prometheus(_body("hybrid-mtp", "metrics_after")),
        parse_prometheus(_body("hybrid-mtp", "metrics_before")),
    )
    expected = (after["sglang:generation_tokens_total"] - before.get("sglang:generation_tokens_total", 0)) / (
        after["sglang:spec_verify_calls_total"] - before.get("sglang:spec_verify_calls_total", 0)
    )
    assert mtp.get("spec_accept_length") == pytest.approx(expected)
    assert 1.0 <= mtp.get("spec_accept_length") <= 4.0  # NEXTN 3 steps: 1 to 4 tokens per verify
    assert window("dense").get("spec_accept_length") is None


def _exposition(
    ttft: dict[str, float],
    *,
    requests: float,
    prompt: float,
    generated: float,
    cached: float | None,
    running: float = 3,
    queued: float = 2,
    usage: tuple[float, float] = (0.4, 0.7),
) -> str:
    lines = []
    for stream in ("true", "false"):  # two label sets: every figure must sum them
        lines.append(f'sglang:num_requests_total{{is_streaming="{stream}"}} {requests / 2}')
        lines.append(f'sglang:prompt_tokens_total{{is_streaming="{stream}"}} {prompt / 2}')
        lines.append(f'sglang:generation_tokens_total{{is_streaming="{stream}"}} {generated / 2}')
        for le, count in ttft.items():
            lines.append(
                f'sglang:time_to_first_token_seconds_bucket{{is_streaming="{stream}",le="{le}"}} {count / 2}'
            )
    if cached is not None:
        lines.append(f'sglang:cached_tokens_total{{cache_source="device"}} {cached}')
    for rank, use in enumerate(usage):
        lines.append(f'sglang:num_running_reqs{{tp_rank="{rank}"}} {running / 2}')
        lines.append(f'sglang:num_queue_reqs{{tp_rank="{rank}"}} {queued / 2}')
        lines.append(f'sglang:token_usage{{tp_rank="{rank}"}} {use}')
    return "\n".join(lines) + "\n"


def test_synthetic_window_by_hand() -> None:
    """Window of 10 s: 40 requests, 8,000 prompt tokens of which 2,000 cached, 4,000 generated.
    TTFT over the window: 20 in (0, 0.1], 16 in (0.1, 0.5], 4 in (0.5, 1]; so p50 is at rank 20
    (the first bucket's top, 0.1) and p99 at rank 39.6: 0.5 + 0.5 * (39.6 - 36) / 4 = 0.95.
    The window's own buckets matter, not the totals: the earlier scrape had 100 slow requests."""
    before = _exposition(
        {"0.1": 0, "0.5": 0, "1.0": 100, "+Inf": 100}, requests=100, prompt=1000, generated=1000, cached=None
    )
    after = _exposition(
        {"0.1": 20, "0.5": 36, "1.0": 140, "+Inf": 140},
        requests=140,
        prompt=9000,
        generated=5000,
        cached=2000,
    )
    f = figures(Scrape.of_text(before, 5.0), Scrape.of_text(after, 15.0))
    assert f.why is None
    assert f.get("requests_per_s") == pytest.approx(4.0)
    assert f.get("input_tps") == pytest.approx(800.0)
    assert f.get("output_tps") == pytest.approx(400.0)
    assert f.get("prefix_hit_rate") == pytest.approx(0.25)
    assert f.get("ttft_p50_s") == pytest.approx(0.1)
    assert f.get("ttft_p99_s") == pytest.approx(0.95)
    assert f.get("tpot_p50_s") is None  # no TPOT histogram in this exposition
    assert f.get("running") == 3 and f.get("queued") == 2
    assert f.get("kv_use") == pytest.approx(0.7)  # the fullest rank, not a sum of fractions
    assert f.get("spec_accept_length") is None


def test_a_restart_between_scrapes_keeps_the_gauges_and_says_why() -> None:
    busy = _exposition({"0.1": 50, "+Inf": 60}, requests=60, prompt=600, generated=600, cached=None)
    fresh = _exposition(
        {"0.1": 1, "+Inf": 1}, requests=1, prompt=10, generated=10, cached=None, running=1, queued=0
    )
    f = figures(Scrape.of_text(busy, 0.0), Scrape.of_text(fresh, 2.0))
    assert f.why is not None and "restarted" in f.why
    assert f.get("requests_per_s") is None and f.get("ttft_p99_s") is None
    assert f.get("running") == 1 and f.get("queued") == 0


def test_a_failed_scrape_is_a_figure_set_with_a_reason() -> None:
    good = Scrape.of_text(_exposition({"+Inf": 1}, requests=1, prompt=1, generated=1, cached=None), 0.0)
    failed = Scrape(1.0, None, "/metrics unreadable: ConnectError")
    assert figures(good, failed).why == "/metrics unreadable: ConnectError"
    assert all(v is None for v in figures(good, failed).values.values())
    recovered = Scrape.of_text(_exposition({"+Inf": 3}, requests=3, prompt=3, generated=3, cached=None), 2.0)
    assert figures(failed, recovered).get("running") == 3  # gauges at once; rates from the next round
    assert figures(
        recovered,
        Scrape.of_text(_exposition({"+Inf": 5}, requests=5, prompt=5, generated=5, cached=None), 3.0),
    ).get("requests_per_s") == pytest.approx(2.0)


def test_quantile_edges() -> None:
    assert quantile(0.5, {1.0: 0, math.inf: 0}) is None  # nothing observed
    assert quantile(0.99, {1.0: 0, 2.0: 0, math.inf: 10}) == 2.0  # all beyond the last bound: that bound
    assert quantile(0.5, {1.0: 10, math.inf: 10}) == pytest.approx(0.5)  # from 0 inside the first bucket
    assert quantile(0.5, {1.0: 4}) is None  # no +Inf bucket: not a histogram


def test_every_figure_has_a_query_over_the_window() -> None:
    for figure in FIGURES:
        assert figure.key in KEYS and figure.worse in ("higher", "lower")
        assert "sglang:" in figure.promql
