"""The qualification report: results.json (the stable schema, docs/qualify.md), report.md and a
self-contained report.html, all from the same QualifyReport.

The top answers "should this release serve?": the verdict and why, the figures that matter
beside the baseline release's with their deltas and spread (cutover.py), what changed between
the two releases, and pictures (pictures.py). Then, folded (collapsed in HTML, the same order in
Markdown), every suite's gates, figures, method and failure transcripts, and the server config
captured. `write_report_files` draws the same report from any two results.json documents."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..bench.headline import rows_html, rows_records
from ..report import render, table_html, table_markdown, write_atomic, write_json
from .cutover import cutover
from .results import QualifyReport, results_document

MAX_TRANSCRIPTS_SHOWN = 10  # per suite in md/html; results.json keeps them all


@dataclass
class Against:
    """What the report compares with: the baseline's results.json (None: no baseline), which
    release that is and why, and both releases' records (release.json; empty for a bare URL)."""

    doc: dict[str, Any] | None = None
    name: str | None = None
    record: dict[str, Any] = field(default_factory=dict)
    baseline_record: dict[str, Any] = field(default_factory=dict)
    bench: dict[str, Any] | None = None  # each release's newest kept bench results.json, if any
    baseline_bench: dict[str, Any] | None = None
    qualified: str | None = None  # the stored verdict and its basis, when judged again here (rejudge.py)
    notes: list[str] = field(default_factory=list)  # what the baseline is worth (not qualified, limited)


def write_reports(report: QualifyReport, against: Against | None = None) -> None:
    doc = results_document(report)
    write_json(report.report_dir / "results.json", doc)
    # pictures cost a second or two: drawn once the run is over, not in each suite's interim report
    write_report_files(doc, report.report_dir, against, draw=report.finished_at is not None)


def write_report_files(
    doc: dict[str, Any], folder: Path, against: Against | None = None, *, draw: bool = True
) -> None:
    """report.md, report.html and comparison.json (the top section's figures) from a results.json
    document; results.json itself is the caller's."""
    from .pictures import pictures

    against = against or Against()
    top = cutover(
        doc,
        against.doc,
        baseline_name=against.name,
        current_record=against.record,
        baseline_record=against.baseline_record,
        current_bench=against.bench,
        baseline_bench=against.baseline_bench,
        qualified=against.qualified,
        notes=against.notes,
    )
    write_json(Path(folder) / "comparison.json", top.as_dict())
    drawn = pictures(doc, against.doc) if draw else []
    rows = _rows_frame(top)
    sections = [_rendered_section(s) for s in doc["suites"]]
    overview = pd.DataFrame(
        [
            {
                "suite": s["name"],
                "verdict": s["verdict"] + (" (limited)" if s["limited"] else ""),
                "duration_s": s["duration_s"],
                "reason": s["reason"],
            }
            for s in doc["suites"]
        ]
    )
    server = _server_table(doc["server"])
    common = {
        "doc": doc,
        "title": f"deploytool qualify: {doc['verdict']}",
        "top": top.as_dict(),
        "pictures": drawn,
    }
    write_atomic(
        Path(folder) / "report.md",
        render(
            "qualify.md.j2",
            overview=table_markdown(overview),
            server=table_markdown(server),
            comparison=table_markdown(rows),
            sections=[md for md, _ in sections],
            **common,
        ),
    )
    write_atomic(
        Path(folder) / "report.html",
        render(
            "qualify.html.j2",
            overview=table_html(overview),
            server=table_html(server),
            comparison_html=rows_html(top.rows),
            sections=[html for _, html in sections],
            **common,
        ),
    )


# A suite's section as report.md and report.html show it, by the suite's results.json entry. The
# runner rewrites the report after every suite (so a killed run leaves one), and each rewrite
# drew every finished suite's tables again, unchanged: the most CPU a qualification spent in
# deploytool's own code. The key is the entry's repr, which tells apart every value (a tuple from a
# list, a string from a number) the tables could show differently, in its order.
_RENDERED: OrderedDict[str, tuple[dict[str, Any], dict[str, Any]]] = OrderedDict()
_RENDERED_KEPT = 32
_RENDERED_LOCK = threading.Lock()


def _rendered_section(suite: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(report.md's, report.html's) section of one suite."""
    key = repr(suite)
    with _RENDERED_LOCK:
        hit = _RENDERED.get(key)
        if hit is not None:
            _RENDERED.move_to_end(key)
            return hit
    s = _section(suite)
    md = {
        **s,
        "gates_table": table_markdown(s["gates_df"]),
        "figures_table": table_markdown(s["figures_df"]),
        "tables": {k: table_markdown(v) for k, v in s["tables"].items()},
        "heatmaps": s["heatmaps_md"],
    }
    html = {
        **s,
        "gates_table": table_html(s["gates_df"]),
        "figures_table": table_html(s["figures_df"]),
        "tables": {k: table_html(v) for k, v in s["tables"].items()},
    }
    with _RENDERED_LOCK:
        _RENDERED[key] = (md, html)
        while len(_RENDERED) > _RENDERED_KEPT:
            _RENDERED.popitem(last=False)
    return md, html


def _rows_frame(top: Any) -> pd.DataFrame:
    return pd.DataFrame(rows_records(top.rows))


def _section(suite: dict[str, Any]) -> dict[str, Any]:
    gates = pd.DataFrame(
        [
            {
                "gate": g["name"],
                "passed": "yes" if g["passed"] else "NO",
                "measured": f"{_cell(g['measured'])}{g.get('unit', '')}",
                "needs": f"{g['comparison']} {_cell(g['threshold'])}{g.get('unit', '')}",
                "detail": g["detail"],
            }
            for g in suite["gates"]
        ]
    )
    heatmaps = {k: v for k, v in suite["figures"].items() if is_heatmap(v)}
    scalars, tables = flatten_figures({k: v for k, v in suite["figures"].items() if k not in heatmaps})
    failures = [t for t in suite["transcripts"] if not t.get("passed")][:MAX_TRANSCRIPTS_SHOWN]
    return {
        "name": suite["name"],
        "verdict": suite["verdict"],
        "reason": suite["reason"],
        "limited": suite["limited"],
        "method": suite["method"],
        "gates_df": gates,
        "figures_df": pd.DataFrame([{"figure": k, "value": _cell(v)} for k, v in scalars.items()]),
        "tables": tables,
        "heatmaps": {k: heatmap_html(v) for k, v in heatmaps.items()},
        "heatmaps_md": {k: table_markdown(heatmap_frame(v)) for k, v in heatmaps.items()},
        "failures": [json.dumps(t, indent=2, default=str, ensure_ascii=False) for t in failures],
        "failure_count": sum(1 for t in suite["transcripts"] if not t.get("passed")),
    }


def is_heatmap(value: Any) -> bool:
    """A figure shaped {rows, columns, values} (a matrix of scores 0..1) is drawn as a heat map."""
    return isinstance(value, dict) and {"rows", "columns", "values"} <= set(value)


def heatmap_frame(value: dict[str, Any]) -> pd.DataFrame:
    return (
        pd.DataFrame(
            [[_cell(v) for v in row] for row in value["values"]],
            index=value["rows"],
            columns=value["columns"],
        )
        .rename_axis(value.get("title", ""))
        .reset_index()
    )


def heatmap_html(value: dict[str, Any]) -> str:
    """A table whose cells are coloured from red (0) through yellow to green (1); empty cells grey."""
    from html import escape

    def colour(v: float | None) -> str:
        if v is None:
            return "#ddd"
        v = max(0.0, min(1.0, float(v)))
        red, green = (255, int(510 * v)) if v < 0.5 else (int(510 * (1 - v)), 200)
        return f"rgb({red},{green},80)"

    head = "".join(f"<th>{escape(str(c))}</th>" for c in value["columns"])
    body = "".join(
        f"<tr><th>{escape(str(r))}</th>"
        + "".join(
            f'<td style="background:{colour(v)};text-align:center">{"–" if v is None else f"{v:.2f}"}</td>'
            for v in row
        )
        + "</tr>"
        for r, row in zip(value["rows"], value["values"], strict=False)  # a ragged row: as far as it goes
    )
    title = escape(value.get("title", ""))
    return f'<table class="heatmap"><caption>{title}</caption><tr><th></th>{head}</tr>{body}</table>'


def flatten_figures(
    figures: dict[str, Any], prefix: str = ""
) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """Scalars as dotted keys; lists of objects (per-depth, per-request rows) as tables."""
    scalars: dict[str, Any] = {}
    tables: dict[str, pd.DataFrame] = {}
    for key, value in figures.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value and len(value) <= 40:
            inner_scalars, inner_tables = flatten_figures(value, dotted + ".")
            scalars.update(inner_scalars)
            tables.update(inner_tables)
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            tables[dotted] = pd.DataFrame([{k: _cell(v) for k, v in row.items()} for row in value])
        else:
            scalars[dotted] = value
    return scalars, tables


def _server_table(server: dict[str, Any] | None) -> pd.DataFrame:
    if not server:
        return pd.DataFrame()
    rows = [
        {"field": k, "value": _cell(server.get(k))}
        for k in ("url", "reachable", "ready", "health_status", "error", "server_info_path")
    ]
    info = server.get("server_info") or {}
    rows += [
        {"field": f"server_info.{k}", "value": _cell(v)}
        for k, v in info.items()
        if not isinstance(v, (dict, list)) or k == "internal_states"
    ]
    rows += [
        {"field": f"model_info.{k}", "value": _cell(v)} for k, v in (server.get("model_info") or {}).items()
    ]
    models = (server.get("models") or {}).get("data") or []
    rows += [{"field": f"models[{i}]", "value": _cell(m)} for i, m in enumerate(models)]
    return pd.DataFrame(rows)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
        return text if len(text) <= 300 else text[:297] + "..."
    return str(value)
