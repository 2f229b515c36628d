"""The cutover comparison from two results.json documents and two release records: the figures
that matter with their deltas, whether each delta is beyond the spread the runs recorded, the
verdict's reasons, and what changed between the releases. Pure functions, built documents."""

from __future__ import annotations

import json

from cutover_docs import results

from deploytool.qualify.cutover import NO_SPREAD, cutover, decision_rows, release_changes, verdict_reasons


def by_figure(rows):
    return {r.figure: r for r in rows}


def test_a_slower_release_is_worse_beyond_the_spread_on_decode_and_tpot():
    top = cutover(results(decode=200.0, seed=5), results(decode=400.0), baseline_name="release 1")
    rows = by_figure(top.rows)
    decode = rows["decode, 1 request"]
    assert decode.before == 400.0 and decode.after == 200.0
    assert decode.delta == -200.0 and round(decode.delta_pct, 1) == -50.0
    assert decode.worse and decode.beyond and decode.status == "WORSE, beyond the spread"
    assert "interval" in decode.spread
    tpot = rows["TPOT p50, 1 request"]
    assert tpot.after > tpot.before and tpot.worse and tpot.beyond  # slower decode: longer per token
    assert rows["TPOT p99, 1 request"].spread.startswith(NO_SPREAD)
    assert "decode, 1 request" in [r.figure for r in top.regressions]
    assert "worse beyond the measured spread" in top.headline() and "release 1" in top.headline()


def test_the_same_speed_measured_again_is_within_the_spread():
    top = cutover(results(seed=7), results(seed=0), baseline_name="release 1")
    spread_rows = [r for r in top.rows if r.beyond is not None]
    assert len(spread_rows) >= 4
    assert all(r.status == "within the spread" for r in spread_rows), [
        (r.figure, r.spread) for r in spread_rows
    ]
    assert not top.regressions and "no figure worse" in top.headline()
    # figures without a recorded spread say so (or that nothing changed), never "within"
    for r in top.rows:
        if r.beyond is None:
            assert r.status in ("unchanged", NO_SPREAD), r.status


def test_quality_figures_compare_with_mcnemar_or_say_no_spread():
    before = results(gsm8k="1" * 30)
    now = results(gsm8k="0" * 12 + "1" * 18, needle=(1.0, 0.6), tools=(50, 56), stress_errors=["timeout"])
    rows = by_figure(decision_rows(now, before))
    gsm = rows["GSM8K accuracy, deploytool thinking-off (flexible)"]
    assert gsm.worse and gsm.beyond and "12 right->wrong" in gsm.spread
    needle = rows["needle pass rate at 20,000 tokens"]
    assert needle.delta == -0.4 * 1 or round(needle.delta, 6) == -0.4
    assert needle.beyond is None and needle.status == NO_SPREAD
    assert rows["tool calls passed"].after == 50 / 56 and rows["tool calls passed"].worse
    stress = rows["stress: failed requests"]
    assert (stress.before, stress.after, stress.worse) == (0, 1, True)
    # one flip in thirty is not beyond the spread
    small = by_figure(decision_rows(results(gsm8k="0" + "1" * 29), before))
    assert small["GSM8K accuracy, deploytool thinking-off (flexible)"].status == "within the spread"


def test_the_verdict_says_why_from_the_failed_gates():
    doc = results(verdict="failed", gates_failed=["regression: decode, 1 request"])
    why = verdict_reasons(doc)
    assert why == ["performance: regression: decode, 1 request: measured 0.5, needs >= 0.9"]
    assert verdict_reasons(results())[0].startswith("every gate passed: 1 gates in 6 suites")


def test_what_changed_lists_image_runtime_flags_weights_and_profile():
    before, now = results(decode_tps_flag=400), results(version="0.5.18", decode_tps_flag=200, seed=3)
    now["target"]["image"] = "deploytool/sim:2"
    now["target"]["model"] = {"identity": "hub:org/m@def"}
    now["server"]["server_info"]["chunked_prefill_size"] = 4096
    now["target"]["image_labels"] = {"dev.deploytool.toolchain": json.dumps({"patches": "sha256:1"})}
    changes = release_changes(before, now, {"profile": "sim"}, {"profile": "sim-v2"})
    assert "profile: sim -> sim-v2" in changes
    assert "runtime version: 0.5.17 -> 0.5.18" in changes
    assert "image patches: None -> sha256:1" in changes
    assert "weights: hub:org/m@abc -> hub:org/m@def" in changes
    assert "launch chunked_prefill_size: 8192 -> 4096" in changes
    assert "launch sim_settings.decode_tps: 400 -> 200" in changes
    # the record's image wins over the results' (the record is what `up` started)
    assert any(line.startswith("image: ") for line in changes)
    # what differs every run (port, start time) is no change
    assert not any("port" in line or "startup_time" in line for line in changes)
    assert release_changes(before, results(decode_tps_flag=400, seed=9), {}, {}) == []


def test_without_a_baseline_the_top_has_this_releases_figures_only():
    top = cutover(results(), None)
    assert top.baseline is None and top.changes == [] and "no baseline" in top.headline()
    assert all(
        r.before is None and r.after is not None for r in top.rows if r.figure != "stress: failed requests"
    )
    assert json.loads(json.dumps(top.as_dict()))["rows"][0]["status"] == "only in this release"


def test_compares_headline_names_the_figures_worse_beyond_the_spread():
    from deploytool.bench.compare import Comparison, ComparisonRow, headlines

    def row(label, better, interval):
        return ComparisonRow(
            key=label,
            label=label,
            unit="tok/s",
            better=better,
            values=[1.0, 1.0],
            ratios=[None, 1.0],
            failed=[0, 0],
            intervals=[None, interval],
        )

    rows = [
        row("decode", "higher", [0.45, 0.55]),
        row("ttft", "lower", [0.9, 1.2]),
        row("prefill", "higher", [1.1, 1.3]),
        row("no samples", "higher", None),
    ]
    comparison = Comparison(runs=[None, None], rows=rows, same_method=True)  # type: ignore[list-item]
    assert headlines(comparison) == [
        "run B against run A: 1 figure(s) worse beyond the measured spread (decode); "
        "1 better beyond it (3 figures with an interval)"
    ]
    comparison.rows = rows[1:]
    assert headlines(comparison)[0].startswith(
        "run B against run A: no figure worse beyond the measured spread"
    )


def test_pictures_are_inline_pngs_whose_alt_text_states_the_figure():
    import base64

    from deploytool.qualify.pictures import pictures

    now, before = results(decode=200.0, seed=2, tools=(40, 56)), results()
    perf = now["suites"][0]["figures"]
    perf["roofline"] = {
        "card": "NVIDIA H200",
        "points": [
            {
                "concurrency": 1,
                "ceiling_tps_per_request": 900.0,
                "measured_tps_per_request": 200.0,
                "share": 0.222,
            }
        ],
    }
    now["suites"][2]["figures"]["heatmap"] = {
        "rows": ["depth 0.1", "depth 0.9"],
        "columns": ["8192", "20000"],
        "values": [[1.0, 0.5], [1.0, None]],
    }
    now["suites"][3]["figures"]["by_category"] = {
        "simple": {"passed": 8, "total": 8},
        "parallel": {"passed": 2, "total": 8},
    }
    before["suites"][3]["figures"]["by_category"] = {
        "simple": {"passed": 8, "total": 8},
        "parallel": {"passed": 8, "total": 8},
    }
    drawn = {p.title.split(":")[0].split(" per ")[0]: p for p in pictures(now, before)}
    assert set(drawn) == {
        "Latency distributions",
        "Needle in a haystack",
        "Decode against the roofline of NVIDIA H200",
        "GSM8K accuracy",
        "Tool calls",
    }
    for p in drawn.values():
        head, data = p.uri.split(",", 1)
        assert head == "data:image/png;base64" and base64.b64decode(data).startswith(b"\x89PNG")
    assert "lowest 0.50 at depth 0.1, 20000 tokens; 2 of 3 cells at 1.00" in drawn["Needle in a haystack"].alt
    assert (
        "c=1: measured 200 of a 900 tok/s ceiling (22%)"
        in drawn["Decode against the roofline of NVIDIA H200"].alt
    )
    assert "parallel: baseline 1, this release 0.25" in drawn["Tool calls"].alt
    assert "TPOT (ms), 1 request: baseline median" in drawn["Latency distributions"].alt
    # without a card's roofline, no roofline picture (the sim has none)
    del perf["roofline"]
    assert not any("roofline" in p.title for p in pictures(now, None))


def test_a_kept_bench_run_stands_in_when_qualify_ran_no_performance_suite():
    def without_performance(doc):
        doc["suites"] = [s for s in doc["suites"] if s["name"] != "performance"]
        return doc

    def bench(doc, fingerprint):
        return {
            "schema": "deploytool.bench/v1",
            "method_fingerprint": fingerprint,
            "figures": doc["suites"][0]["figures"]["bench_figures"],
        }

    slow, fast = results(decode=200.0, seed=3), results(decode=400.0)
    top = cutover(
        without_performance(results(decode=200.0, seed=3)),
        without_performance(results()),
        current_bench=bench(slow, "m1"),
        baseline_bench=bench(fast, "m1"),
    )
    decode = by_figure(top.rows)["decode, 1 request"]
    assert (decode.before, decode.after, decode.status) == (400.0, 200.0, "WORSE, beyond the spread")
    # measured with another method: shown, never judged against the spread
    other = cutover(
        without_performance(results(decode=200.0, seed=3)),
        without_performance(results()),
        current_bench=bench(slow, "m2"),
        baseline_bench=bench(fast, "m1"),
    )
    decode = by_figure(other.rows)["decode, 1 request"]
    assert decode.beyond is None and "another bench method (m1 vs m2)" in decode.spread
    assert not other.regressions


def test_a_needle_heatmap_with_no_length_measured_is_no_picture_and_no_warning():
    import warnings

    from deploytool.qualify.pictures import needle_picture

    now = results()
    now["suites"][2]["figures"]["heatmap"] = {
        "rows": ["depth 0.1", "depth 0.9"],
        "columns": [],
        "values": [[], []],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warned of a singular x-range drawing nothing
        assert needle_picture(now) is None
    now["suites"][2]["figures"]["heatmap"] = {"rows": ["depth 0.1"], "columns": ["8192"], "values": [[None]]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert needle_picture(now) is not None  # one column, even unscored, is a picture


def test_a_qualification_whose_baseline_was_never_qualified_says_so():
    from types import SimpleNamespace

    from deploytool.qualify.runner import baseline_of
    from deploytool.release.state import journal

    journal("qualify.skipped", slot="cpu", release=1, reason="--skip-qualify")
    target = SimpleNamespace(
        release=SimpleNamespace(slot="cpu", release=2),
        previous=SimpleNamespace(release=1),
        previous_results=None,
        baseline="release 1 (it served before release 2 was cut over; it has no stored qualify results)",
    )
    against = baseline_of(target)
    assert against.doc is None and against.notes == [
        "release 1 was not qualified (brought up with --skip-qualify): nothing to compare with"
    ]
    top = cutover(results(), None, notes=against.notes)
    assert (
        top.headline()
        == "qualify PASSED; release 1 was not qualified (brought up with --skip-qualify): nothing to compare with"
    )
