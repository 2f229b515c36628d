"""Bench outputs: results.json (everything, raw timings included), report.md, and a
self-contained report.html whose plots are inline PNGs; the same for a comparison."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from .. import report as shared
from ..report import pyplot as plt  # matplotlib.pyplot (Agg), imported at the first plot drawn
from . import stats
from .compare import Comparison, format_value, headlines, top_rows
from .headline import bench_top, rows_html, rows_records
from .pictures import latency_picture
from .results import BenchRun

_PLOT_PHASES = ("decode", "load", "sweep")


# --- tables -------------------------------------------------------------------------------
def figures_frame(run: BenchRun) -> pd.DataFrame:
    rows = [
        {
            "figure": f.label,
            "value": format_value(f.value, f.unit),
            "completed": f.completed,
            "failed": f.failed,
        }
        for f in run.figures
    ]
    return pd.DataFrame(rows, columns=["figure", "value", "completed", "failed"])


def groups_frame(run: BenchRun) -> pd.DataFrame:
    rows = []
    for g in run.groups:
        rows.append(
            {
                "group": g.name,
                "concurrency": g.concurrency,
                "requests": g.requests,
                "failed": g.failed,
                "aggregate tok/s": _num(g.aggregate_output_tps),
                "decode tok/s p50": _num(g.decode_tps_median),
                "p10": _num(g.decode_tps_p10),
                "p90": _num(g.decode_tps_p90),
                "TTFT p50": format_value(g.ttft_median_s, "s"),
                "TTFT p90": format_value(g.ttft_p90_s, "s"),
                "prefill tok/s": _num(g.prefill_tps_median),
                "prompt tok": _num(g.prompt_tokens_median),
                "output tok": _num(g.output_tokens_median),
                "reasoning tok": _num(g.reasoning_tokens_median),
                "answer tok": _num(g.answer_tokens_median),
                "ITL p50": format_value(g.itl_p50_s, "s"),
                "ITL p95": format_value(g.itl_p95_s, "s"),
                "ITL p99": format_value(g.itl_p99_s, "s"),
                "ITL max": format_value(g.itl_max_s, "s"),
                "TPOT p50": format_value(g.tpot_median_s, "s"),
                "pass": g.repeat + 1,
                "server idle before": {True: "yes", False: "NO", None: "not measured"}[
                    (g.idle_wait or {}).get("idle")
                ],
                "valid": "INVALID (leftover work)" if g.contaminated else "yes",
                "errors": ", ".join(f"{k} x{v}" for k, v in g.errors.items()) or "",
            }
        )
    return pd.DataFrame(rows)


def sweep_frame(run: BenchRun) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "concurrency": p.concurrency,
                "per-user tok/s": _num(p.per_user_tps),
                "per-GPU tok/s": _num(p.per_gpu_tps),
                "TTFT p50": format_value(p.ttft_median_s, "s"),
                "failed": p.failed,
                "on Pareto front": "yes" if p.on_front else "",
            }
            for p in run.sweep
        ]
    )


def comparison_frame(comparison: Comparison) -> pd.DataFrame:
    names = [_run_name(i) for i in range(len(comparison.runs))]
    rows = []
    for row in comparison.rows:
        line: dict[str, Any] = {"figure": row.label}
        for i, name in enumerate(names):
            line[name] = format_value(row.values[i], row.unit) + (
                f" ({row.failed[i]} failed)" if row.failed[i] else ""
            )
        for i in range(1, len(names)):
            verdict = row.verdict(i)
            ratio = row.ratios[i]
            iv = row.intervals[i] if i < len(row.intervals) else None
            text = (
                "sampled, not compared"
                if row.sampled
                else "–"
                if ratio is None
                else f"{ratio:.2f}x" + (f" [{iv[0]:.2f}-{iv[1]:.2f}]" if iv else "")
            )
            if row.no_difference(i):
                text += " no difference measured"
            line[f"{names[i]}/{names[0]}"] = text + (f" {verdict}" if verdict else "")
        rows.append(line)
    return pd.DataFrame(rows)


# --- plots ----------------------------------------------------------------------------------
def latency_plots(run: BenchRun) -> list[tuple[str, str]]:
    """(title, data URI) for each plot the run has data for."""
    measured = [r for r in run.requests if r.phase != "warmup" and r.ok]
    plots: list[tuple[str, str]] = []
    groups = [g.name for g in run.groups if g.phase in _PLOT_PHASES]
    decode = [_present(stats.decode_tps(r) for r in measured if r.group == g) for g in groups]
    if any(decode):
        plots.append(("Per-request decode tokens/s", _boxplot(groups, decode, "tokens/s per request")))
    ttft_groups = [g.name for g in run.groups]
    ttfts = [_present(stats.ttft(r) for r in measured if r.group == g) for g in ttft_groups]
    if any(ttfts):
        plots.append(("Time to first token", _boxplot(ttft_groups, ttfts, "seconds", log=True)))
    prefill = [g for g in run.groups if g.phase == "prefill" and g.prefill_tps_median is not None]
    if prefill:
        fig, ax = plt.subplots(figsize=(6, 3.2))
        ax.plot([g.prompt_tokens_median for g in prefill], [g.prefill_tps_median for g in prefill], "o-")
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel("prefill tokens/s (median)")
        ax.grid(alpha=0.3)
        plots.append(("Prefill speed against prompt length", _uri(fig)))
    for phase, title in (
        ("longctx", "Decode speed after a long prompt"),
        ("ablation", "Interactivity against input length (concurrency 1)"),
    ):
        lengths = [
            g
            for g in run.groups
            if g.phase == phase and g.decode_tps_median is not None and not g.contaminated
        ]
        if lengths:
            fig, ax = plt.subplots(figsize=(6, 3.2))
            for r in sorted({g.repeat for g in lengths}):
                pts = sorted((g for g in lengths if g.repeat == r), key=lambda g: g.prompt_tokens_median or 0)
                ax.plot(
                    [g.prompt_tokens_median for g in pts],
                    [g.decode_tps_median for g in pts],
                    "o-",
                    label=f"pass {r + 1}",
                )
            ax.set_xscale("log")
            ax.set_xlabel("input tokens")
            ax.set_ylabel("tok/s per user (median decode)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            plots.append((title, _uri(fig)))
    if run.sweep:
        plots.append(("Concurrency sweep: Pareto curve", pareto_plot(run)))
    return plots


def pareto_plot(run: BenchRun) -> str:
    points = [p for p in run.sweep if p.per_user_tps is not None and p.per_gpu_tps is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(
        [p.per_user_tps for p in points],
        [p.per_gpu_tps for p in points],
        "o",
        color="#999",
        label="sweep point",
    )
    front = sorted((p for p in points if p.on_front), key=lambda p: p.per_user_tps or 0.0)
    ax.plot(
        [p.per_user_tps for p in front],
        [p.per_gpu_tps for p in front],
        "o-",
        color="#c0392b",
        label="Pareto front",
    )
    _pareto_axes(
        ax,
        points,
        fontsize=8,
        xlabel="per-user tokens/s (median decode speed of one request)",
        ylabel="per-GPU tokens/s (aggregate output / GPUs)",
    )
    return _uri(fig)


def _pareto_axes(ax: Any, points: list[Any], *, fontsize: int, xlabel: str, ylabel: str) -> None:
    """What every Pareto picture has: each point named by its concurrency, the axes, the grid."""
    for p in points:
        ax.annotate(
            f"c={p.concurrency}",
            (p.per_user_tps, p.per_gpu_tps),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=fontsize,
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def overlaid_pareto_plot(comparison: Comparison) -> str | None:
    """One curve per run (per workload curve within it): two releases' fronts on one chart."""
    runs = [
        (i, [p for p in pts if p.per_user_tps is not None and p.per_gpu_tps is not None])
        for i, pts in enumerate(comparison.sweeps)
    ]
    if sum(1 for _, pts in runs if pts) < 1:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, pts in runs:
        for curve in sorted({p.curve for p in pts}):
            line = sorted((p for p in pts if p.curve == curve), key=lambda p: p.concurrency)
            ax.plot(
                [p.per_user_tps for p in line],
                [p.per_gpu_tps for p in line],
                "o-",
                label=f"{_run_name(i)}{f' ({curve})' if curve else ''}",
            )
    _pareto_axes(
        ax, [p for _, pts in runs for p in pts], fontsize=7, xlabel="tok/s per user", ylabel="tok/s per GPU"
    )
    return _uri(fig)


def comparison_plot(comparison: Comparison) -> str | None:
    rows = [r for r in comparison.rows if r.better != "neither" and any(x is not None for x in r.ratios[1:])]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) * (len(comparison.runs) - 1) + 1.2))
    labels, values, colours = [], [], []
    for row in rows:
        for i in range(1, len(comparison.runs)):
            labels.append(f"{row.label} ({_run_name(i)})")
            values.append(row.ratios[i] or 0)
            colours.append({"better": "#2e7d32", "worse": "#c62828"}.get(row.verdict(i) or "", "#888"))
    ax.barh(labels, values, color=colours)
    ax.axvline(1.0, color="#333", lw=1)
    ax.invert_yaxis()
    ax.set_xlabel(f"ratio against {_run_name(0)} (green: better, red: worse)")
    return _uri(fig)


def _present(values: Iterable[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _boxplot(labels: list[str], data: list[list[float]], ylabel: str, log: bool = False) -> str:
    keep = [(lab, d) for lab, d in zip(labels, data, strict=True) if d]
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(keep)), 3.4))
    ax.boxplot([d for _, d in keep], showfliers=True)
    ax.set_xticks(range(1, len(keep) + 1), [lab for lab, _ in keep], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.grid(alpha=0.3, axis="y")
    return _uri(fig)


def _uri(fig: Any) -> str:
    try:
        return shared.figure_data_uri(fig)
    finally:
        plt.close(fig)


# --- writers ----------------------------------------------------------------------------------
def write_run_report(
    run: BenchRun, directory: Path, baseline: tuple[str, dict[str, Any]] | None = None
) -> dict[str, Path]:
    """`baseline`: (name, results.json) of the baseline release's kept bench run; the report then
    opens with this run's figures beside it, deltas and spread (bench/headline.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    context = _run_context(run)
    top = bench_top(run, baseline)
    context.update(
        top=top,
        comparison_md=shared.table_markdown(pd.DataFrame(rows_records(top["rows"]))) if top else "",
        comparison_html=rows_html(top["rows"]) if top else "",
    )
    out = {
        "results.json": shared.write_json(directory / "results.json", run.to_json()),
        "report.md": shared.write_atomic(directory / "report.md", shared.render("bench.md.j2", **context)),
    }
    context["plots"] = latency_plots(run)
    context.update(
        figures_html=shared.table_html(context.pop("figures_df")),
        groups_html=shared.table_html(context.pop("groups_df")),
        sweep_html=shared.table_html(context.pop("sweep_df")) if run.sweep else "",
    )
    out["report.html"] = shared.write_atomic(
        directory / "report.html", shared.render("bench.html.j2", **context)
    )
    return out


def _run_context(run: BenchRun) -> dict[str, Any]:
    figures_df, groups_df, sweep_df = figures_frame(run), groups_frame(run), sweep_frame(run)
    return {
        "title": f"deploytool bench: {run.environment.get('target', '')}",
        "run": run,
        "figures_md": shared.table_markdown(figures_df),
        "groups_md": shared.table_markdown(groups_df),
        "sweep_md": shared.table_markdown(sweep_df) if run.sweep else "",
        "figures_df": figures_df,
        "groups_df": groups_df,
        "sweep_df": sweep_df,
        "method_items": sorted(run.method.items()),
    }


def write_comparison_report(comparison: Comparison, directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    frame = comparison_frame(comparison)
    names = _names(comparison)
    tops = comparison_tops(comparison)
    picture = latency_picture(
        [
            (name, {k: {"samples": v} for k, v in d.items()})
            for name, d in zip(names, comparison.distributions, strict=False)
        ],
        f"Latency distributions: {', '.join(names)}",
    )
    context = {
        "title": "deploytool compare",
        "comparison": comparison,
        "names": names,
        "table_md": shared.table_markdown(frame),
        "headlines": headlines(comparison),
        "tops": tops,
        "picture": picture,
    }
    out = {
        "comparison.json": shared.write_json(directory / "comparison.json", comparison),
        "comparison.md": shared.write_atomic(
            directory / "comparison.md", shared.render("bench_compare.md.j2", **context)
        ),
    }
    context.update(
        table_html=shared.table_html(frame),
        plot=comparison_plot(comparison),
        pareto=overlaid_pareto_plot(comparison),
    )
    out["comparison.html"] = shared.write_atomic(
        directory / "comparison.html", shared.render("bench_compare.html.j2", **context)
    )
    return out


def comparison_tops(comparison: Comparison) -> list[dict[str, Any]]:
    """The top section of a comparison, one per later run against the first: its headline and the
    cutover report's table (figure, both values, delta, against the spread), as HTML and Markdown."""
    names, lines = _names(comparison), headlines(comparison)
    out = []
    for i in range(1, len(comparison.runs)):
        rows = top_rows(comparison, i)
        sides = (names[0], names[i])
        out.append(
            {
                "title": f"{names[i]} against {names[0]}",
                "headline": lines[i - 1],
                "rows": rows,
                "comparison_html": rows_html(rows, sides),
                "md": shared.table_markdown(pd.DataFrame(rows_records(rows, sides)))
                if rows
                else "_(no figures)_",
            }
        )
    return out


def _names(comparison: Comparison) -> list[str]:
    return [_run_name(i) for i in range(len(comparison.runs))]


def _run_name(i: int) -> str:
    return f"run {chr(65 + i)}" if i < 26 else f"run {i}"


def _num(value: float | None) -> str:
    return "–" if value is None else format_value(value, "")
