"""A/B: two or more bench runs side by side, one column per run and a ratio against the first.

Runs measured with different methods are refused (UsageError naming the settings that differ)
unless the caller asks to see them anyway, and then the comparison says so on every output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .headline import NO_SPREAD, Row, _latency_rows, _pooled_p99, _scaled, tpot_samples
from .regression import change
from .results import BenchRun, load_run


@dataclass
class RunHeader:
    source: str
    run_id: str
    started_at: str
    endpoint: str
    profile: str | None
    image: str | None
    preset: str
    method_fingerprint: str
    requests_total: int
    errors_total: int
    complete: bool


@dataclass
class ComparisonRow:
    key: str
    label: str
    unit: str
    better: str
    values: list[float | None]
    ratios: list[float | None]  # value / first run's value; None for the first run or a gap
    failed: list[int]
    # the ratio's 95% bootstrap interval per run (None: first run, or no per-request samples)
    intervals: list[list[float] | None] = field(default_factory=list)
    spreads: list[list[float] | None] = field(default_factory=list)  # [min, max] over each run's repeats
    sampled: bool = False  # a gauge's highest /metrics sample: no ratio (see SAMPLED_NOTE)

    def no_difference(self, i: int) -> bool:
        iv = self.intervals[i] if i < len(self.intervals) else None
        return iv is not None and iv[0] <= 1.0 <= iv[1]

    def change_text(self, i: int) -> str:
        """'267 -> 626 tok/s (2.34x [2.20-2.51])': run 0 against run i, with the ratio's interval;
        'no difference measured' when the interval spans 1."""
        a, b, r = self.values[0], self.values[i], self.ratios[i]
        if self.sampled:
            return f"{format_value(a, self.unit)} / {format_value(b, self.unit)} (sampled, not compared)"
        iv = self.intervals[i] if i < len(self.intervals) else None
        interval = f" [{iv[0]:.2f}-{iv[1]:.2f}]" if iv is not None else ""
        ratio = f" ({r:.2f}x{interval})" if r is not None else ""
        if self.no_difference(i):
            ratio += ": no difference measured"
        if self.unit == "s":  # ms or s each, so each side keeps its own unit
            return f"{format_value(a, self.unit)} -> {format_value(b, self.unit)}{ratio}"
        return f"{format_value(a, '')} -> {format_value(b, self.unit)}{ratio}"

    def verdict(self, i: int) -> str | None:
        """'better' / 'worse' / None, from the figure's direction (a ratio within 1% is None)."""
        r = self.ratios[i]
        if r is None or self.better == "neither" or abs(r - 1) < 0.01 or self.no_difference(i):
            return None
        return "better" if (r > 1) == (self.better == "higher") else "worse"


@dataclass
class Comparison:
    runs: list[RunHeader]
    rows: list[ComparisonRow]
    same_method: bool
    method_differences: dict[str, list[Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    sweeps: list[list[Any]] = field(default_factory=list)  # each run's Pareto points, for overlaid curves
    # each run's per-request samples (per pass) of the single-request latency figures: the top
    # section's tails and TPOT, and its first picture
    distributions: list[dict[str, list[list[float]]]] = field(default_factory=list)


# The figures whose per-request samples a comparison keeps (besides every load_c*_ttft_s)
DISTRIBUTION_KEYS = ("ttft_c1_s", "decode_c1_tps")


def top_rows(comparison: Comparison, i: int) -> list[Row]:
    """Run A beside run i as the cutover report's rows: decode and load tok/s, TTFT p50 (the
    comparison's own ratio intervals), TTFT and TPOT p99 (no spread), TPOT p50 (the decode
    samples inverted, the same bootstrap). A compare of runs without those figures gets every
    figure that has a direction."""
    by_key = {r.key: r for r in comparison.rows if not r.sampled}
    loads = sorted(
        (k for k in by_key if k.startswith("load_c") and k.endswith("_tps")),
        key=lambda k: (int(k.split("_")[1][1:]), k),
    )
    ttfts = ["ttft_c1_s", *sorted(k for k in by_key if k.startswith("load_c") and k.endswith("_ttft_s"))]
    rows: list[Row] = []
    if not any(k in by_key for k in ("decode_c1_tps", *loads, *ttfts)):
        rows = [_row(r, i) for r in by_key.values() if r.better in ("higher", "lower")]
    rows += [_row(by_key[k], i) for k in ("decode_c1_tps", *loads) if k in by_key]
    dists = [comparison.distributions[k] if k < len(comparison.distributions) else {} for k in (0, i)]
    for key in ttfts:
        if key not in by_key:
            continue
        p50 = _row(by_key[key], i)
        p50.figure = f"TTFT p50, {by_key[key].label.split(', ', 1)[-1]}"
        rows.append(p50)
        samples = [{"samples": d.get(key) or []} for d in dists]
        if not any(_n(x) for x in samples):
            continue
        p99 = Row(
            figure=f"TTFT p99, {p50.figure.split(', ', 1)[-1]}",
            unit="ms",
            better="lower",
            before=_scaled(_pooled_p99(samples[0]), 1000.0),
            after=_scaled(_pooled_p99(samples[1]), 1000.0),
        )
        if p99.before is not None and p99.after is not None:
            p99.spread = f"{NO_SPREAD} (a tail of {_n(samples[0])} and {_n(samples[1])} requests)"
        rows.append(p99)
    if "decode_c1_tps" in by_key:
        values = by_key["decode_c1_tps"].values
        before, after = (
            {"key": "decode_c1_tps", "value": values[k], "samples": d.get("decode_c1_tps") or []}
            if values[k] is not None
            else None
            for k, d in zip((0, i), dists, strict=True)
        )
        rows += _latency_rows(tpot_samples(after), tpot_samples(before), "TPOT", 1.0)
    for row in rows:
        row.group = "performance"
        if not comparison.same_method:  # as the performance gate: another method is shown, not judged
            row.beyond, row.spread = None, "measured with different bench methods: not compared"
    return rows


def _row(row: ComparisonRow, i: int) -> Row:
    """A comparison row as a top-section row: times in ms, the verdict from its ratio interval."""
    scale = 1000.0 if row.unit == "s" else 1.0
    out = Row(
        figure=row.label,
        unit="ms" if row.unit == "s" else row.unit,
        better=row.better,
        before=_scaled(row.values[0], scale),
        after=_scaled(row.values[i], scale),
    )
    iv = row.intervals[i] if i < len(row.intervals) else None
    if iv is not None and row.ratios[i] is not None:
        out.beyond = not row.no_difference(i)
        out.spread = (
            f"ratio {row.ratios[i]:.3f}, 95% interval [{iv[0]:.2f}-{iv[1]:.2f}] "
            "(bootstrap over passes and requests)"
        )
    elif row.ratios[i] is not None:
        out.spread = f"{NO_SPREAD} (no per-request samples stored)"
    return out


def _n(fig: dict[str, Any]) -> int:
    return sum(len(p) for p in fig.get("samples") or [])


def headlines(comparison: Comparison) -> list[str]:
    """The top of a comparison, one line per later run: which figures are worse (and better)
    beyond the measured spread, i.e. the ratio's whole 95% interval on that side of 1."""
    out = []
    for i in range(1, len(comparison.runs)):
        worse, better, tested = [], [], 0
        for row in comparison.rows:
            iv = row.intervals[i] if i < len(row.intervals) else None
            if iv is None or row.sampled or row.better not in ("higher", "lower"):
                continue
            tested += 1
            low_side = iv[1] < 1.0
            high_side = iv[0] > 1.0
            if (low_side and row.better == "higher") or (high_side and row.better == "lower"):
                worse.append(row.label)
            elif low_side or high_side:
                better.append(row.label)
        name, first = f"run {chr(65 + i)}", "run A"
        line = (
            f"{name} against {first}: {len(worse)} figure(s) worse beyond the measured spread ({'; '.join(worse)})"
            if worse
            else f"{name} against {first}: no figure worse beyond the measured spread"
        )
        line += f"; {len(better)} better beyond it" if better else ""
        out.append(f"{line} ({tested} figures with an interval)")
    return out


def compare_runs(paths: list[Path], *, allow_mixed_methods: bool = False) -> Comparison:
    """Each path a results.json or a report folder. Refuses fewer than two runs, and runs whose
    methods differ unless allow_mixed_methods (then `same_method` is False and warnings say why)."""
    if len(paths) < 2:
        raise UsageError("compare needs at least two runs", hint="deploytool compare RUN_A RUN_B [RUN_C ...]")
    return compare_loaded([load_run(Path(p)) for p in paths], allow_mixed_methods=allow_mixed_methods)


def compare_loaded(runs: list[BenchRun], *, allow_mixed_methods: bool = False) -> Comparison:
    differences = method_differences(runs)
    warnings: list[str] = []
    if differences:
        listing = "; ".join(f"{k}: {' vs '.join(repr(v) for v in vals)}" for k, vals in differences.items())
        if not allow_mixed_methods:
            raise UsageError(
                f"these runs were measured with different methods ({listing})",
                hint="re-run them with the same method, or pass --allow-mixed-methods to see "
                "them side by side, flagged",
            )
        warnings.append(f"DIFFERENT METHODS, figures are not like for like: {listing}")
    for i, run in enumerate(runs):
        name = f"run {chr(65 + i) if i < 26 else i} ({run.source or run.run_id})"
        if run.errors_total:
            warnings.append(
                f"{name}: {run.errors_total} of {run.requests_total} requests failed; "
                "its medians use completed requests only"
            )
        if not run.complete:
            warnings.append(f"{name}: incomplete (the run's time bound was reached)")
        if run.invalid_groups:
            warnings.append(
                f"{name}: phases measured while the server ran leftover work, left out: "
                f"{', '.join(run.invalid_groups)}"
            )
        if not run.cache_check.ok:
            warnings.append(f"{name}: {run.cache_check.message}")
    rows = _rows(runs)
    if any(r.sampled for r in rows):
        interval = runs[0].method.get("metrics_interval_s", 1.0)
        warnings.append(SAMPLED_NOTE.format(interval=interval))
    return Comparison(
        runs=[_header(r) for r in runs],
        rows=rows,
        same_method=not differences,
        method_differences=differences,
        warnings=warnings,
        sweeps=[r.sweep for r in runs],
        distributions=[_distribution(r) for r in runs],
    )


def _distribution(run: BenchRun) -> dict[str, list[list[float]]]:
    out = {}
    loads = [f.key for f in run.figures if f.key.startswith("load_c") and f.key.endswith("_ttft_s")]
    for key in (*DISTRIBUTION_KEYS, *loads):
        fig = run.figure(key)
        if fig is not None and fig.samples:
            out[key] = [[round(v, 6) for v in p if v is not None] for p in fig.samples]
    return out


# The server's load gauges (running and queued requests, KV token usage) are read from /metrics
# every metrics_interval_s: the highest read is a lower bound of the real peak, and two runs'
# lower bounds have no ratio that means anything.
SAMPLED_KEYS = frozenset(
    {"server_token_usage_peak", "server_running_requests_peak", "server_queued_requests_peak"}
)
SAMPLED_NOTE = (
    "the server's gauges (running and queued requests, KV token usage) are the highest of /metrics "
    "reads every {interval:g} s: each says the load reached at least that value; a peak between two reads "
    "is missed, so they are shown side by side, not compared as a ratio"
)


def method_differences(runs: list[BenchRun]) -> dict[str, list[Any]]:
    """Setting -> its value in each run, for every setting that is not the same in all of them."""
    from .method import BenchMethod

    comparable = []
    for run in runs:
        settings = {k: v for k, v in run.method.items() if k in BenchMethod.model_fields}
        try:
            comparable.append(BenchMethod.model_validate(settings).comparable_dict())
        except Exception:
            comparable.append(dict(run.method))
    keys = sorted({k for c in comparable for k in c})
    return {k: [c.get(k) for c in comparable] for k in keys if len({repr(c.get(k)) for c in comparable}) > 1}


def _rows(runs: list[BenchRun]) -> list[ComparisonRow]:
    order: list[str] = []
    for run in runs:  # the first run's order, then any figure only later runs have
        order += [f.key for f in run.figures if f.key not in order]
    rows = []
    for key in order:
        figs = [run.figure(key) for run in runs]
        proto = next(f for f in figs if f is not None)
        values = [f.value if f else None for f in figs]
        first = values[0]
        sampled = key in SAMPLED_KEYS
        ratios = [None] + [
            (v / first) if (v is not None and first and not sampled) else None for v in values[1:]
        ]
        intervals: list[list[float] | None] = [None]
        for f in figs[1:]:
            c = change(figs[0], f) if (figs[0] is not None and f is not None and not sampled) else None
            interval = c.interval if c is not None else None
            intervals.append([round(interval[0], 4), round(interval[1], 4)] if interval else None)
        rows.append(
            ComparisonRow(
                key=key,
                label=proto.label,
                unit=proto.unit,
                better=proto.better,
                values=values,
                ratios=ratios,
                failed=[f.failed if f else 0 for f in figs],
                intervals=intervals,
                spreads=[f.spread if f else None for f in figs],
                sampled=sampled,
            )
        )
    return rows


def _header(run: BenchRun) -> RunHeader:
    env = run.environment or {}
    labels = env.get("image_labels") or {}
    release = env.get("release") or {}
    return RunHeader(
        source=run.source,
        run_id=run.run_id,
        started_at=run.started_at,
        endpoint=env.get("endpoint", ""),
        profile=env.get("profile"),
        image=release.get("image") or labels.get("org.opencontainers.image.version"),
        preset=str(run.method.get("preset")),
        method_fingerprint=run.method_fingerprint,
        requests_total=run.requests_total,
        errors_total=run.errors_total,
        complete=run.complete,
    )


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{text} {unit}".strip()
