"""The cutover report's pictures: inline PNGs (data: URIs, so report.html stays one file that
needs no network), each with alt text that states what the picture shows in words.

Drawn from two results.json documents (this release, and the baseline or None): the needle grid
as a heat map, TTFT and TPOT distributions side by side, decode speed against the card's
bandwidth roofline when the bench stored one, and GSM8K and tool-call results per item class.
A picture whose figures neither run has is left out.
"""

from __future__ import annotations

from typing import Any

from ..bench.pictures import Picture  # the picture both reports open with
from ..bench.pictures import latency_picture as bench_latency_picture
from ..report import figure_data_uri
from ..report import pyplot as plt  # matplotlib.pyplot (Agg), imported at the first picture drawn
from .changes import suite_figures

THIS, BEFORE = "this release", "baseline"
COLOURS = {THIS: "#1f6fb4", BEFORE: "#a0a0a0"}


def pictures(current: dict[str, Any], baseline: dict[str, Any] | None) -> list[Picture]:
    """Every picture the two runs have figures for, most telling first."""
    base = baseline or {"suites": []}
    out = [
        latency_picture(current, base),
        needle_picture(current),
        roofline_picture(current),
        gsm8k_picture(current, base),
        tools_picture(current, base),
    ]
    return [p for p in out if p is not None]


def _uri(fig: Any) -> str:
    try:
        return figure_data_uri(fig)
    finally:
        plt.close(fig)


def latency_picture(current: dict[str, Any], baseline: dict[str, Any]) -> Picture | None:
    """TTFT and TPOT of single requests, one box per release: the distributions, not the medians."""
    sides = [
        (run, {f["key"]: f for f in suite_figures(doc, "performance").get("bench_figures") or []})
        for run, doc in ((BEFORE, baseline), (THIS, current))
    ]
    return bench_latency_picture(sides, "Latency distributions: this release against the baseline")


def needle_picture(current: dict[str, Any]) -> Picture | None:
    heat = suite_figures(current, "needle").get("heatmap")
    # no length measured (a fault took every one): no cell to draw, and an empty image is a
    # picture of nothing that matplotlib warns about
    if not (isinstance(heat, dict) and heat.get("values") and heat.get("columns")):
        return None
    values = [[float("nan") if v is None else float(v) for v in row] for row in heat["values"]]
    fig, ax = plt.subplots(figsize=(1.2 + 1.0 * len(heat["columns"]), 0.7 + 0.45 * len(heat["rows"])))
    image = ax.imshow(values, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(heat["columns"])), [str(c) for c in heat["columns"]], fontsize=8)
    ax.set_yticks(range(len(heat["rows"])), [str(r) for r in heat["rows"]], fontsize=8)
    ax.set_xlabel("prompt tokens", fontsize=8)
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            ax.text(j, i, "–" if v != v else f"{v:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.05)
    flat = [
        (v, r, c)
        # a kept results.json's heat map: a ragged row is drawn as far as it goes, as before
        for r, row in zip(heat["rows"], heat["values"], strict=False)
        for c, v in zip(heat["columns"], row, strict=False)
        if v is not None
    ]
    worst = min(flat, default=None)
    alt = (
        f"Heat map of needle-in-a-haystack scores (0 red to 1 green), {len(heat['rows'])} depths by "
        f"{len(heat['columns'])} prompt lengths ({', '.join(map(str, heat['columns']))} tokens); "
        + (
            "no scores"
            if worst is None
            else f"every cell at {worst[0]:.2f}"
            if worst[0] >= 1.0
            else f"lowest {worst[0]:.2f} at {worst[1]}, {worst[2]} tokens; "
            f"{sum(1 for v, _, _ in flat if v >= 1.0)} of {len(flat)} cells at 1.00"
        )
    )
    return Picture("Needle in a haystack: score by depth and length", alt + ".", _uri(fig))


def roofline_picture(current: dict[str, Any]) -> Picture | None:
    """Measured decode tok/s per request against the card's bandwidth ceiling at each concurrency."""
    roof = suite_figures(current, "performance").get("roofline") or {}
    points = [p for p in roof.get("points") or [] if p.get("ceiling_tps_per_request")]
    if not points:
        return None
    labels = [f"c={p['concurrency']}" for p in points]
    fig, ax = plt.subplots(figsize=(4.8, 2.6))
    xs = range(len(points))
    ax.bar(
        [x - 0.2 for x in xs],
        [p["ceiling_tps_per_request"] for p in points],
        0.4,
        color="#ccc",
        label="roofline (bandwidth bound)",
    )
    ax.bar(
        [x + 0.2 for x in xs],
        [p.get("measured_tps_per_request") or 0 for p in points],
        0.4,
        color=COLOURS[THIS],
        label="measured",
    )
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("decode tok/s per request", fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    words = "; ".join(
        f"{lab}: measured {_fmt(p.get('measured_tps_per_request'))} of a "
        f"{p['ceiling_tps_per_request']:.0f} tok/s ceiling"
        + (f" ({100 * p['share']:.0f}%)" if p.get("share") else "")
        for lab, p in zip(labels, points, strict=True)
    )
    return Picture(
        f"Decode against the roofline of {roof.get('card', 'the card')}",
        f"Bar chart of decode speed per request against the memory-bandwidth ceiling on "
        f"{roof.get('card', 'the card')}: {words}.",
        _uri(fig),
    )


def gsm8k_picture(current: dict[str, Any], baseline: dict[str, Any]) -> Picture | None:
    """Accuracy per mode (style x thinking), with the baseline's beside it."""
    now, before = (
        suite_figures(current, "gsm8k").get("modes") or {},
        suite_figures(baseline, "gsm8k").get("modes") or {},
    )
    classes = list(now) or list(before)
    if not classes:
        return None
    acc = lambda modes, m: (modes.get(m) or {}).get(f"{(modes.get(m) or {}).get('gate_metric')}_accuracy")  # noqa: E731
    return _paired_bars(
        "GSM8K accuracy per mode",
        "GSM8K accuracy (gate metric) per mode",
        classes,
        {BEFORE: [acc(before, m) for m in classes] if before else None, THIS: [acc(now, m) for m in classes]},
    )


def tools_picture(current: dict[str, Any], baseline: dict[str, Any]) -> Picture | None:
    now = suite_figures(current, "tools").get("by_category") or {}
    before = suite_figures(baseline, "tools").get("by_category") or {}
    classes = list(now) or list(before)
    if not classes:
        return None

    def rate(cats: dict[str, Any], c: str) -> float | None:
        return (cats[c]["passed"] / cats[c]["total"]) if c in cats and cats[c].get("total") else None

    return _paired_bars(
        "Tool calls: pass rate per category",
        "Tool-call pass rate per category",
        classes,
        {
            BEFORE: [rate(before, c) for c in classes] if before else None,
            THIS: [rate(now, c) for c in classes],
        },
    )


def _paired_bars(
    title: str, what: str, classes: list[str], runs: dict[str, list[float | None] | None]
) -> Picture:
    shown = {run: vals for run, vals in runs.items() if vals is not None}
    fig, ax = plt.subplots(figsize=(max(4.5, 0.75 * len(classes) + 1.5), 2.6))
    width = 0.8 / len(shown)
    for i, (run, vals) in enumerate(shown.items()):
        ax.bar(
            [x + (i - (len(shown) - 1) / 2) * width for x in range(len(classes))],
            [v or 0 for v in vals],
            width,
            color=COLOURS[run],
            label=run,
        )
    ax.set_xticks(range(len(classes)), classes, rotation=25, ha="right", fontsize=7)
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, axis="y")
    words = "; ".join(
        f"{c}: " + ", ".join(f"{run} {_fmt(vals[k])}" for run, vals in shown.items())
        for k, c in enumerate(classes)
    )
    return Picture(title, f"Bar chart of {what}, 0 to 1: {words}.", _uri(fig))


def _fmt(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3g}"
