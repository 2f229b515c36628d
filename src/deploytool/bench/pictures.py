"""The first picture of a report that sets two runs side by side: TTFT and TPOT of single
requests, one box per run, drawn from their per-request samples (a distribution, not a median).
An inline PNG (data: URI) with alt text that says in words what it shows. qualify's cutover
report and bench's compare report both open with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..report import figure_data_uri
from ..report import pyplot as plt  # matplotlib.pyplot (Agg), imported at the first picture drawn
from .headline import tpot_samples

TTFT_PANEL, TPOT_PANEL = "TTFT (ms), 1 request", "TPOT (ms), 1 request"


@dataclass
class Picture:
    title: str
    alt: str
    uri: str


def latency_picture(sides: list[tuple[str, dict[str, Any]]], title: str) -> Picture | None:
    """`sides`: (run name, its bench figures by key) in the order drawn; a run's `ttft_c1_s` and
    `decode_c1_tps` figures give its boxes (TPOT: the decode samples inverted). None when no run
    has either."""
    series: list[tuple[str, str, list[float]]] = []  # (panel, run, values in ms)
    for run, bench in sides:
        ttft = [
            v * 1000 for p in (bench.get("ttft_c1_s") or {}).get("samples") or [] for v in p if v is not None
        ]
        tpot = [v for p in (tpot_samples(bench.get("decode_c1_tps")) or {}).get("samples") or [] for v in p]
        series += [(TTFT_PANEL, run, ttft), (TPOT_PANEL, run, tpot)]
    panels = [
        name for name in (TTFT_PANEL, TPOT_PANEL) if any(vals for panel, _, vals in series if panel == name)
    ]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 2.6))
    axes = [axes] if len(panels) == 1 else list(axes)
    words = []
    for ax, panel in zip(axes, panels, strict=True):
        runs = [(run, vals) for p, run, vals in series if p == panel and vals]
        ax.boxplot(
            [vals for _, vals in runs],
            orientation="horizontal",
            widths=0.6,
            patch_artist=True,
            boxprops={"facecolor": "#dde8f3"},
            medianprops={"color": "#a4161a"},
        )
        ax.set_yticks(range(1, len(runs) + 1), [run for run, _ in runs], fontsize=8)
        ax.set_title(panel, fontsize=9)
        ax.grid(alpha=0.3, axis="x")
        words.append(
            f"{panel}: "
            + "; ".join(
                f"{run} median {_median(v):.3g} ms, max {max(v):.3g} ms over {len(v)} requests"
                for run, v in runs
            )
        )
    fig.tight_layout()
    return Picture(title, "Box plots of per-request latency. " + ". ".join(words) + ".", _uri(fig))


def _uri(fig: Any) -> str:
    try:
        return figure_data_uri(fig)
    finally:
        plt.close(fig)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
