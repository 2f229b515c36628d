"""A search's report: the table (candidate, flags that differ, the plan's KV tokens and running
limit beside what the server reported, throughput, TTFT and TPOT p50/p99, goodput under the
SLO, the estimate and its interval, verdict), the Pareto picture (per-GPU output tok/s against per-user tok/s, every
point labelled with its candidate), and the winner as a profile that `extends:` the original
with only the changed flags."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from ..bench import stats
from ..files import write_atomic
from ..profiles import Profile
from ..yamlio import dump_yaml
from .results import CandidateResult
from .space import Slo, followed_expectations

COLUMNS = (
    "candidate",
    "flags that differ",
    "KV tokens plan / server",
    "running limit plan / server",
    "tok/s/GPU (estimate)",
    "interval",
    "starts / passes",
    "TTFT p50/p99 ms",
    "TPOT p50/p99 ms",
    "goodput",
    "verdict",
)


def table_rows(results: list[CandidateResult]) -> list[list[str]]:
    rows = []
    for r in results:
        plan, reported = r.planned, r.reported()
        point = r.best_point()
        est = r.estimate
        why = (
            r.planned.pruned
            or ("; ".join(r.refused) if r.refused else None)
            or r.failed_start
            or r.why
            or r.missed_by()
        )
        # a candidate with no point inside the SLO shows its closest point's throughput, not 0
        figure = _f(est.mean) if est else (f"({_f(point.per_gpu_tps)} outside the SLO)" if point else "-")
        rows.append(
            [
                r.id,
                r.planned.candidate.label(),
                f"{_n(plan.pool_tokens)} / {_n(reported.get('kv_tokens'))}",
                f"{_n(plan.running_limit)} / {_n(reported.get('running_limit'))}",
                figure,
                f"[{_f(est.low)}, {_f(est.high)}]" if est else "-",
                f"{len(r.starts)} / {len(r.passes)}",
                f"{_f(point.ttft_p50_ms)} / {_f(point.ttft_p99_ms)}" if point else "-",
                f"{_f(point.tpot_p50_ms)} / {_f(point.tpot_p99_ms)}" if point else "-",
                f"{point.goodput:.0%} at c={point.concurrency}" if point else "-",
                r.verdict + (f": {why}" if why else ""),
            ]
        )
    return rows


def markdown(results: list[CandidateResult], header: str) -> str:
    lines = [header, "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in table_rows(results):
        lines.append("| " + " | ".join(cell.replace("|", "\\|").replace("\n", " ") for cell in row) + " |")
    return "\n".join(lines) + "\n"


MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">", "p", "d", "H", "8")


def frontier_points(results: list[CandidateResult]) -> list[tuple[str, int, float, float, bool]]:
    """(candidate, concurrency, per-user tok/s, per-GPU tok/s, inside the SLO): each level's
    median over passes; inside when most of its passes met the SLO there."""
    out = []
    for r in results:
        levels = sorted({pt.concurrency for p in r.passes for pt in p.points})
        for c in levels:
            pts = [pt for p in r.passes for pt in p.points if pt.concurrency == c]
            user = stats.median(pt.per_user_tps for pt in pts)
            gpu = stats.median(pt.per_gpu_tps for pt in pts)
            if user is not None and gpu is not None:
                inside = 2 * sum(1 for pt in pts if pt.meets) > len(pts)
                out.append((r.id, c, float(user), float(gpu), inside))
    return out


def frontier(points: list[tuple[str, int, float, float, bool]]) -> list[tuple[str, int, float, float, bool]]:
    """The Pareto frontier of the points inside the SLO, by per-user tok/s: a point that misses
    the SLO is no launch a user could run at, however fast it looks."""
    inside = [p for p in points if p[4]]
    return [inside[i] for i in stats.pareto_front([(p[2], p[3]) for p in inside])]


def slo_user_tps(slo: Slo | None) -> float | None:
    """The SLO as a floor on per-user tok/s: its own target, or the TPOT target's inverse."""
    if slo is None:
        return None
    floors = [v for v in (slo.min_user_tps, 1000.0 / slo.tpot_p99_ms if slo.tpot_p99_ms else None) if v]
    return max(floors) if floors else None


def write_frontier_png(
    results: list[CandidateResult], path: Path, title: str, slo: Slo | None = None
) -> Path | None:
    """Every measured level of every candidate, one marker (and colour) per candidate, hollow
    where the level misses the SLO; the Pareto frontier drawn over the points inside the SLO
    only; the SLO as a vertical line on the per-user axis; labels only on the frontier's points,
    each placed where it overlaps no other label."""
    points = frontier_points(results)
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display: rendered to PNG only
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    colours = plt.get_cmap("tab20")
    for n, cid in enumerate(dict.fromkeys(p[0] for p in points)):
        mine = [p for p in points if p[0] == cid]
        colour, marker = colours(n % 20), MARKERS[n % len(MARKERS)]
        ax.plot([p[2] for p in mine], [p[3] for p in mine], linewidth=0.8, alpha=0.5, color=colour)
        for inside in (True, False):
            sel = [p for p in mine if p[4] is inside]
            if sel:
                ax.scatter(
                    [p[2] for p in sel],
                    [p[3] for p in sel],
                    marker=marker,
                    s=36,
                    color=colour,
                    facecolors=colour if inside else "none",
                    label=cid if inside or not any(q[4] for q in mine) else None,
                )
    front = frontier(points)
    if front:
        ax.plot(
            [p[2] for p in front],
            [p[3] for p in front],
            color="black",
            linestyle="--",
            linewidth=1.5,
            label="frontier (inside the SLO)",
        )
    floor = slo_user_tps(slo)
    if floor is not None:
        ax.axvline(floor, color="tab:red", linewidth=1.2, label=f"SLO: {floor:g} tok/s per user")
    ax.set_xlabel("per-user output tok/s")
    ax.set_ylabel("per-GPU output tok/s")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.canvas.draw()
    place_labels(ax, [(f"{p[0]} c{p[1]}", p[2], p[3]) for p in front])
    ax.legend(fontsize=7, ncol=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def place_labels(ax: Any, labels: list[tuple[str, float, float]]) -> list[Any]:
    """Each label at the first of a few offsets where its box meets no label placed before;
    one that fits nowhere is left out (the legend still names the candidate). Returns the
    placed labels' boxes."""
    placed: list[Any] = []
    renderer = ax.figure.canvas.get_renderer()
    for text, x, y in labels:
        for dx, dy in ((5, 5), (5, -12), (-40, 5), (-40, -12), (5, 16), (5, -22)):
            ann = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=7)
            box = ann.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed):
                placed.append(box)
                break
            ann.remove()
    return placed


def winner_profile(
    profile: Profile,
    winner: CandidateResult,
    base: CandidateResult | None,
    *,
    name: str,
    evidence: dict[str, Any],
) -> str:
    """The winner as YAML: `extends:` the original, only the changed flags, a comment naming
    the evidence."""
    changed = {**winner.planned.candidate.changes, **winner.planned.candidate.derived}
    est = winner.estimate
    mean = est.mean if est else (winner.median or 0.0)
    interval = f" [{est.low:.1f}, {est.high:.1f}]" if est else ""
    against = ""
    base_mean = base.estimate.mean if base is not None and base.estimate else None
    if base_mean:
        against = f"; the profile's own launch {base_mean:.1f} tok/s/GPU (x{mean / base_mean:.2f})"
    comment = [
        f"Written by `deploytool tune` on {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}:",
        f"candidate {winner.id} measured {mean:.1f} tok/s/GPU{interval} over {len(winner.passes)} passes, "
        f"{len(winner.starts)} starts{against}.",
        *(f"{k}: {v}" for k, v in evidence.items() if v),
    ]
    body: dict[str, Any] = {
        "name": name,
        "extends": profile.name,
        "description": f"{profile.name} with the launch flags `deploytool tune` found",
        "server": {"args": changed},
    }
    # `extends` merges dictionaries key by key, so only the expectations the new flags moved are written
    followed = followed_expectations(profile, winner.planned.candidate.profile.server.args)
    if followed:
        body["qualify"] = {"preflight": {"expect": followed}}
    return "".join(f"# {line}\n" for line in comment) + dump_yaml(body)


def write_winner(text: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, text)


def _n(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
