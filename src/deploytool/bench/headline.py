"""The bench figures of a cutover, as rows: this run beside a baseline run, each with its delta
and whether the delta is beyond the spread both runs recorded (the ratio's 95% bootstrap
interval over passes and per-request samples, bench/regression.py: the performance gate's own
rule). qualify's cutover report and bench's report share these rows and their table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from html import escape
from typing import Any

from . import stats
from .regression import change

NO_SPREAD = "no spread recorded"


@dataclass
class Row:
    """One figure of the decision, this release beside the baseline."""

    figure: str
    unit: str
    better: str  # higher | lower
    before: float | None
    after: float | None
    spread: str = NO_SPREAD  # what the verdict on the delta rests on, in words
    beyond: bool | None = None  # the delta is beyond the recorded spread; None: no spread recorded
    group: str = ""  # performance | quality

    @property
    def delta(self) -> float | None:
        return None if self.before is None or self.after is None else self.after - self.before

    @property
    def delta_pct(self) -> float | None:
        return None if self.delta is None or not self.before else 100.0 * self.delta / abs(self.before)

    @property
    def worse(self) -> bool | None:
        if self.delta is None or self.delta == 0:
            return None if self.delta is None else False
        return self.delta < 0 if self.better == "higher" else self.delta > 0

    @property
    def status(self) -> str:
        """WORSE, beyond the spread | better, beyond the spread | within the spread | unchanged (no spread
        recorded, none needed) | no spread recorded | only in one release"""
        if self.before is None or self.after is None:
            return "only in " + ("this release" if self.before is None else "the baseline")
        if self.beyond is None:
            return "unchanged" if self.delta == 0 else NO_SPREAD
        if not self.beyond:
            return "within the spread"
        return "WORSE, beyond the spread" if self.worse else "better, beyond the spread"

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "delta": self.delta,
            "delta_pct": self.delta_pct,
            "worse": self.worse,
            "status": self.status,
        }


def performance_rows(now: dict[str, Any], before: dict[str, Any]) -> list[Row]:
    figs_now = {f["key"]: f for f in now.get("bench_figures") or []}
    figs_before = {f["key"]: f for f in before.get("bench_figures") or []}
    keys = [k for k in ("decode_c1_tps",) if k in figs_now or k in figs_before]
    loads = sorted(
        {k for k in [*figs_now, *figs_before] if k.startswith("load_c") and k.endswith("_tps")},
        key=lambda k: (int(k.split("_")[1][1:]), k),
    )
    keys += loads
    rows = [_bench_row(figs_now.get(k), figs_before.get(k)) for k in keys]
    for key in (
        "ttft_c1_s",
        *[k for k in sorted({*figs_now, *figs_before}) if k.startswith("load_c") and k.endswith("_ttft_s")],
    ):
        if key in figs_now or key in figs_before:
            rows += _latency_rows(figs_now.get(key), figs_before.get(key), "TTFT", 1000.0)
    if "decode_c1_tps" in figs_now or "decode_c1_tps" in figs_before:
        rows += _latency_rows(
            tpot_samples(figs_now.get("decode_c1_tps")),
            tpot_samples(figs_before.get("decode_c1_tps")),
            "TPOT",
            1.0,
        )
    for row in rows:
        row.group = "performance"
    return rows


def _bench_row(now: dict[str, Any] | None, before: dict[str, Any] | None) -> Row:
    proto = now or before or {}
    row = Row(
        figure=str(proto.get("label", proto.get("key"))),
        unit=str(proto.get("unit", "")),
        better=str(proto.get("better", "higher")),
        before=_value(before),
        after=_value(now),
    )
    _bench_spread(row, before, now)
    return row


def _bench_spread(row: Row, before: dict[str, Any] | None, now: dict[str, Any] | None) -> None:
    if before is None or now is None:
        return
    c = change(before, now)
    if c.has_interval:
        row.beyond = not c.no_difference
        row.spread = (
            f"ratio {c.ratio:.3f}, 95% interval {c.interval_text()} (bootstrap over passes and requests)"
        )
    elif c.ratio is not None:
        row.spread = f"{NO_SPREAD} (no per-request samples stored)"


def _latency_rows(
    now: dict[str, Any] | None, before: dict[str, Any] | None, what: str, scale: float
) -> list[Row]:
    """p50 (the median, with the bootstrap's interval) and p99 (pooled samples; no spread) in ms."""
    proto = now or before or {}
    where = str(proto.get("label", "")).split(", ", 1)[-1] if what == "TTFT" else "1 request"
    p50 = Row(
        figure=f"{what} p50, {where}",
        unit="ms",
        better="lower",
        before=_scaled(_value(before), scale),
        after=_scaled(_value(now), scale),
    )
    _bench_spread(p50, before, now)
    p99 = Row(
        figure=f"{what} p99, {where}",
        unit="ms",
        better="lower",
        before=_scaled(_pooled_p99(before), scale),
        after=_scaled(_pooled_p99(now), scale),
    )
    if p99.before is not None and p99.after is not None:
        p99.spread = f"{NO_SPREAD} (a tail of {_count(before)} and {_count(now)} requests)"
    return [p50, p99]


def tpot_samples(decode: dict[str, Any] | None) -> dict[str, Any] | None:
    """Time per output token (ms) of each request, from its decode tok/s: the same samples, inverted."""
    if decode is None:
        return None
    passes = [[1000.0 / v for v in p if v] for p in decode.get("samples") or []]
    pooled = [v for p in passes for v in p]
    value = (
        stats.median([stats.median(p) for p in passes if p])
        if passes
        else (1000.0 / decode["value"] if decode.get("value") else None)
    )
    return {
        "key": "tpot_c1_ms",
        "label": "TPOT, 1 request",
        "unit": "ms",
        "better": "lower",
        "value": value if pooled or value is not None else None,
        "samples": passes,
    }


def _value(fig: dict[str, Any] | None) -> float | None:
    value = (fig or {}).get("value")
    return float(value) if isinstance(value, (int, float)) else None


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def _pooled_p99(fig: dict[str, Any] | None) -> float | None:
    pooled = [v for p in (fig or {}).get("samples") or [] for v in p if v is not None]
    return stats.percentile(pooled, 99) if pooled else None


def _count(fig: dict[str, Any] | None) -> int:
    return sum(len(p) for p in (fig or {}).get("samples") or [])


SIDES = ("baseline", "this release")


def rows_html(rows: list[Row], sides: tuple[str, str] = SIDES) -> str:
    """The comparison table, its rows coloured by status (a class per row); every cell escaped.
    `sides`: the two value columns' headings."""
    head = "".join(f"<th>{escape(h)}</th>" for h in ("figure", *sides, "delta", "against the spread"))
    body = []
    for r in rows:
        cls = "worse" if r.beyond and r.worse else ("better" if r.beyond else "")
        cells = (r.figure, fig_text(r.before, r.unit), fig_text(r.after, r.unit), delta_text(r), r.status)
        body.append(
            f'<tr class="{cls}" title="{escape(r.spread)}">'
            + "".join(f"<td>{escape(str(c))}</td>" for c in cells)
            + "</tr>"
        )
    if not body:
        return "<p><em>(no figures to compare)</em></p>"
    return f'<table class="table compare"><tr>{head}</tr>{"".join(body)}</table>'


def rows_records(rows: list[Row], sides: tuple[str, str] = SIDES) -> list[dict[str, str]]:
    """The same table as records (a Markdown table's rows), with the spread it rests on."""
    return [
        {
            "figure": r.figure,
            sides[0]: fig_text(r.before, r.unit),
            sides[1]: fig_text(r.after, r.unit),
            "delta": delta_text(r),
            "against the spread": r.status,
            "spread": r.spread,
        }
        for r in rows
    ]


def fig_text(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if not unit:  # a share (0..1) or a count
        text = f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"
    else:
        text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def delta_text(row: Row) -> str:
    if row.delta is None:
        return "–"
    sign = "+" if row.delta > 0 else ""
    pct = f" ({sign}{row.delta_pct:.1f}%)" if row.delta_pct is not None else ""
    return f"{sign}{fig_text(row.delta, row.unit)}{pct}"


def regressions_headline(rows: list[Row], against: str) -> str:
    worse = [r.figure for r in rows if r.beyond and r.worse]
    if worse:
        return (
            f"against {against}: {len(worse)} figure(s) worse beyond the measured spread ({'; '.join(worse)})"
        )
    return f"against {against}: no figure worse beyond the measured spread"


def kept_baseline(target: Any) -> tuple[str, dict[str, Any]] | None:
    """The baseline release's newest kept bench run, for a run against a slot's release: the
    release the target's baseline rule chose (checks/targets.py), or None (a URL, no baseline,
    or a baseline never benched)."""
    import json

    from ..checks.reports import newest_kept

    release, previous = getattr(target, "release", None), getattr(target, "previous", None)
    if release is None or previous is None:
        return None
    path = newest_kept(release.slot, previous.release, "bench")
    try:
        doc = json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("figures"), list):
        return None
    return f"release {previous.release}'s bench of {doc.get('started_at', '?')}", doc


def bench_top(run: Any, baseline: tuple[str, dict[str, Any]] | None) -> dict[str, Any] | None:
    """The head of a bench report: this run's figures beside the baseline release's kept run."""
    if baseline is None:
        return None
    name, doc = baseline
    figures = [asdict(f) for f in run.figures]
    rows = performance_rows(
        {"bench_figures": figures},
        {"bench_figures": [f for f in doc["figures"] if isinstance(f, dict) and "key" in f]},
    )
    if doc.get("method_fingerprint") != run.method_fingerprint:  # as the performance gate: not compared
        for row in rows:
            row.beyond = None
            row.spread = f"measured with another bench method ({doc.get('method_fingerprint')}): not compared"
    return {"headline": regressions_headline(rows, name), "rows": rows}
