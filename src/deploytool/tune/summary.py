"""The lines `tune` prints for a person, from the data --json prints (results.json): the space,
what was pruned or refused, the visits, then the verdict, the report and what to do next."""

from __future__ import annotations

from typing import Any


def summary_lines(data: dict[str, Any]) -> list[str]:
    c = data["counts"]
    lines = [
        _space_line(data),
        _flags_line(data.get("flags_check")),
        f"planning: {data['plan_note']}" if data.get("plan_note") else f"planned for {data.get('card')}",
        f"candidates: {c['planned']} planned, {c['refused']} refused by the parser, {c['pruned']} pruned "
        f"by the plan, {c['runnable']} to measure",
    ]
    for cand in data["candidates"]:
        if cand["pruned"] or cand["refused"]:
            lines.append(
                f"  {cand['id']} ({cand['label']}): " + (cand["pruned"] or "; ".join(cand["refused"]))
            )
    if data.get("dry_run"):
        return lines + _dry_run_lines(data)
    lines.append(_visits_line(c))
    lines += [
        f"  {cand['id']} ({cand['label']}): {cand['why']}"
        for cand in data["candidates"]
        if cand["verdict"] == "not started (cannot win)"
    ]
    verdict, tail = _verdict_lines(data)
    lines += verdict
    if data.get("stopped_by_budget") and not data.get("inconclusive"):
        lines.append("stopped by --budget after the race was decided")
    for key in ("runtime_note", "machine_note"):
        if data.get(key):
            lines.append(f"warning: {data[key]}")
    lines.append(f"report: {data['report_dir']}/report.md")
    return lines + tail


def _space_line(data: dict[str, Any]) -> str:
    space = data["space"]
    return (
        "space: "
        + "; ".join(f"{k} {v}" for k, v in space["flags"].items())
        + (f"; derived from the plan: {', '.join(space['derived'])}" if space["derived"] else "")
        + (
            f"; load (concurrency) {space['load']}"
            if space.get("workload", "table") == "table"
            else f"; workload {space['workload']} {space.get('workload_settings') or '(its defaults)'}"
        )
        + f", {space['repeats']} passes per start, SLO "
        + (", ".join(f"{k}={v:g}" for k, v in data["slo"].items() if v is not None) or "none")
    )


def _flags_line(check: dict[str, Any] | None) -> str:
    where = (check or {}).get("where") or ""
    if not where or where.startswith("not checked"):
        return f"flags {where or 'not checked'}"
    return f"flags checked by {where}"


def _dry_run_lines(data: dict[str, Any]) -> list[str]:
    return [
        f"  {cand['id']} ({cand['label']}): to measure"
        for cand in data["candidates"]
        if not cand["pruned"] and not cand["refused"]
    ] + [f"estimate: about {data['estimate_s'] / 60:.1f} min (nothing started)"]


def _visits_line(c: dict[str, Any]) -> str:
    between = max(0.0, c["visit_s"] - c["start_s"] - c["measure_s"] - c["stop_s"])
    return (
        f"started {c['started']} ({c['failed_starts']} failed), {c['passes']} passes; "
        f"{c['visit_s']:.0f} s in visits: {c['start_s']:.0f} s starting, {c['measure_s']:.0f} s measuring, "
        f"{c['stop_s']:.0f} s stopping, {between:.0f} s "
        f"between (warm-up, checks); {c['not_started']} never started"
    )


def _verdict_lines(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The verdict's lines, and the ones printed after the report's path (what to do next)."""
    if data.get("inconclusive"):
        measured = sum(1 for cand in data["candidates"] if cand["passes"])
        return [
            f"inconclusive: {measured} of {data['counts']['runnable']} measured when --budget ran out, "
            "the race not finished: nothing recommended"
        ], [f"go on with: {data['resume']}"]
    if data["winner"] is None:
        return [
            "none qualifies under the SLO; each candidate's closest point:",
            *(
                f"  {cand['id']} ({cand['label']}): {cand['missed_by']}"
                for cand in data["candidates"]
                if cand.get("missed_by")
            ),
        ], []
    return _winner_lines(data)


def _winner_lines(data: dict[str, Any]) -> tuple[list[str], list[str]]:
    conf = f"{data.get('confidence', 0.95):.0%}"
    est = data["winner_estimate"] or {}
    ties = [cand for cand in data["candidates"] if cand["verdict"] == "tie"]
    lines = [
        f"winner: {data['winner']}, {est.get('mean', 0):.1f} tok/s/GPU [{est.get('low', 0):.1f}, "
        f"{est.get('high', 0):.1f}] over {est.get('passes')} passes, {est.get('starts')} starts, "
        + (
            f"beyond every other's interval at {conf}"
            if not ties
            else f"tied at {conf} with {', '.join(t['id'] for t in ties)}"
        )
    ]
    lines += [f"  {t['id']} ({t['label']}): {t['why']}" for t in ties]
    if data["winner"] == "base" or "base" in data["ties"]:
        lines.append("the profile's own launch is not beaten: no change recommended")
    flags = (
        " ".join(f"--{k} {v}" for k, v in (data.get("winner_flags") or {}).items()) or "(the profile's own)"
    )
    ratio = data.get("ratio_to_base")
    tail = [
        f"winner {data['winner']}: {flags}"
        + (
            f"; x{ratio[0]:.2f} [{ratio[1]:.2f}, {ratio[2]:.2f}] over the profile's own launch ({conf})"
            if ratio
            else ""
        )
    ]
    if data["winner_profile"]:
        tail.append(f"profile: {data['winner_profile']} {_profile_state(data)}")
    return lines, tail


def _profile_state(data: dict[str, Any]) -> str:
    if data["recommended"]:
        return "(qualified)"
    if not data["qualify"].get("ran"):
        return (
            "(not qualified: --no-qualify; `tune --resume` without it qualifies the winner "
            "before recommending it)"
        )
    return f"(NOT recommended: qualify {data['qualify']})"
