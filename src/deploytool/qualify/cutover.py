"""The top of the cutover report: should this release serve? Pure functions from two
qualifications' results.json (this release and the baseline, the release it would replace) and
their release records (release.json); nothing here draws a page, and only read_results reads a file.

Each figure that matters for the decision is set beside the baseline's, with its delta and
whether that delta is beyond the spread the runs recorded:

- bench figures (decode tok/s, TTFT, TPOT p50): the performance suite stores every pass's
  per-request samples, so the ratio's 95% bootstrap interval is bench/regression.py's, the same
  rule the performance gate applies; "beyond" means the whole interval lies on one side of 1;
- GSM8K: McNemar's exact test on the same questions (both runs store each question's outcome);
  "beyond" means p < 0.05;
- everything else (p99 tails, needle, tool calls, vision, stress): no spread is recorded, and
  the row says so rather than guessing one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bench.headline import NO_SPREAD, Row, performance_rows, tpot_samples  # noqa: F401  (the report's rows)
from .changes import figures_by_suite, release_changes
from .paired import compare as paired_compare

ALPHA = 0.05  # McNemar's level for "beyond the spread" on GSM8K


@dataclass
class Cutover:
    verdict: str  # this release's qualify verdict
    why: list[str]  # the failed gates, or that every gate passed
    baseline: str | None  # which release it is compared with ("release 1 (rule)"), None: nothing to compare
    rows: list[Row] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)  # what differs between the two releases
    # the verdict's own basis, when it is not the baseline compared with here: the stored
    # qualification's verdict and what it was judged against ("PASSED, against release 1")
    qualified: str | None = None
    notes: list[str] = field(
        default_factory=list
    )  # what the comparison is worth: a limited or unqualified baseline

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.beyond and r.worse]

    def headline(self) -> str:
        """One line: the verdict, and what the comparison adds to it."""
        head = f"qualify {self.verdict.upper()}"
        if self.qualified is not None:  # judged again here: both bases said, the page's first
            head += f", its comparing gates judged against {short_name(self.baseline)} (its qualification: {self.qualified})"
        notes = "".join(f"; {n}" for n in self.notes)
        if self.baseline is None:
            return f"{head}{notes or '; no baseline release to compare with'}"
        worse = self.regressions
        if worse:
            names = "; ".join(r.figure for r in worse)  # labels hold commas themselves
            return (
                f"{head}; against {self.baseline}: {len(worse)} figure(s) worse beyond the measured spread "
                f"({names}){notes}"
            )
        return f"{head}; against {self.baseline}: no figure worse beyond the measured spread{notes}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "why": self.why,
            "baseline": self.baseline,
            "headline": self.headline(),
            "rows": [r.as_dict() for r in self.rows],
            "changes": self.changes,
            "qualified": self.qualified,
            "notes": self.notes,
        }


def cutover(
    current: dict[str, Any],
    baseline: dict[str, Any] | None,
    *,
    baseline_name: str | None = None,
    current_record: dict[str, Any] | None = None,
    baseline_record: dict[str, Any] | None = None,
    current_bench: dict[str, Any] | None = None,
    baseline_bench: dict[str, Any] | None = None,
    qualified: str | None = None,
    notes: list[str] | None = None,
) -> Cutover:
    """The comparison of two results.json documents (the baseline may be None: then only the
    verdict and this release's own figures). `*_bench`: a release's kept bench results.json,
    whose figures stand in when its qualification ran no performance suite. `qualified`: the
    stored verdict and its basis, when `current` was judged again against this baseline
    (rejudge.py); `notes`: what the baseline is (not qualified: why there is none)."""
    rows = decision_rows(current, baseline or {"suites": []}, current_bench, baseline_bench)
    if baseline is None:
        for row in rows:
            row.before, row.spread, row.beyond = None, "no baseline", None
    name = None if baseline is None else (baseline_name or "the baseline release")
    changes = (
        release_changes(baseline, current, baseline_record or {}, current_record or {}) if baseline else []
    )
    notes = list(notes or []) + (limit_notes(current, baseline, name) if baseline else [])
    return Cutover(
        verdict=str(current.get("verdict", "?")),
        why=verdict_reasons(current),
        baseline=name,
        rows=rows,
        changes=changes,
        qualified=qualified,
        notes=notes,
    )


def short_name(name: str | None) -> str:
    """'release 1 (it served before ...)' -> 'release 1'."""
    return (name or "the baseline").split(" (", 1)[0]


def limit_notes(current: dict[str, Any], baseline: dict[str, Any], name: str | None) -> list[str]:
    """A run capped by --limit and one that was not (or capped elsewhere) answered different items."""
    now, before = current.get("limit"), baseline.get("limit")
    if now == before:
        return []
    said = lambda limit: f"with --limit {limit}" if limit is not None else "without --limit"  # noqa: E731
    return [
        f"{short_name(name)} was qualified {said(before)}, this release {said(now)}: its data-driven figures "
        "cover other items (GSM8K is compared on the questions both runs answered)"
    ]


def verdict_reasons(doc: dict[str, Any]) -> list[str]:
    """Why the verdict is what it is: each failed gate and errored suite, else what passed."""
    out: list[str] = []
    if doc.get("could_not_run"):
        out.append(f"could not run: {doc['could_not_run']}")
    suites = doc.get("suites") or []
    for s in suites:
        if s.get("verdict") == "failed":
            failed = [g for g in s.get("gates") or [] if not g.get("passed")]
            for g in failed:
                unit = g.get("unit") or ""
                out.append(
                    f"{s['name']}: {g['name']}: measured {_num(g.get('measured'))}{unit}, needs "
                    f"{g.get('comparison', '')} {_num(g.get('threshold'))}{unit}"
                )
            if not failed:
                out.append(f"{s['name']} failed: {s.get('reason', '')}")
        elif s.get("verdict") == "error":
            out.append(f"{s['name']} could not finish: {s.get('reason', '')}")
    if doc.get("incomplete"):
        out.append("incomplete: qualification was stopped before every suite ran")
    if not out:
        gates = sum(len(s.get("gates") or []) for s in suites)
        ran = [s["name"] for s in suites if s.get("verdict") == "passed"]
        out.append(f"every gate passed: {gates} gates in {len(ran)} suites ({', '.join(ran)})")
    return out


def decision_rows(
    current: dict[str, Any],
    baseline: dict[str, Any],
    current_bench: dict[str, Any] | None = None,
    baseline_bench: dict[str, Any] | None = None,
) -> list[Row]:
    """The figures that matter, in a fixed order; a figure neither release has is left out."""
    after, prior = figures_by_suite(current), figures_by_suite(baseline)
    now, before = speed_figures(after, current_bench), speed_figures(prior, baseline_bench)
    rows = performance_rows(now, before)
    fp_now, fp_before = now.get("bench_method_fingerprint"), before.get("bench_method_fingerprint")
    if (
        fp_now and fp_before and fp_now != fp_before
    ):  # as the performance gate: another method is not compared
        for row in rows:
            row.beyond, row.spread = (
                None,
                f"measured with another bench method ({fp_before} vs {fp_now}): not compared",
            )
    rows += gsm8k_rows(after.get("gsm8k", {}), prior.get("gsm8k", {}))
    rows += needle_rows(after.get("needle", {}), prior.get("needle", {}))
    rows += [
        r
        for r in (
            _rate_row("tool calls passed", _tools(after), _tools(prior)),
            _rate_row("vision cases correct", _vision(after), _vision(prior)),
            _count_row("stress: failed requests", _stress_errors(after), _stress_errors(prior)),
        )
        if r is not None
    ]
    return rows


def speed_figures(suites: dict[str, dict[str, Any]], bench: dict[str, Any] | None) -> dict[str, Any]:
    """The performance suite's bench figures (`suites`: figures_by_suite), else a kept bench
    run's (same fields, same method fingerprint), labelled with where they came from."""
    perf = suites.get("performance", {})
    if perf.get("bench_figures"):
        return perf
    if isinstance(bench, dict) and isinstance(bench.get("figures"), list):
        return {
            "bench_figures": [f for f in bench["figures"] if isinstance(f, dict) and "key" in f],
            "bench_method_fingerprint": bench.get("method_fingerprint"),
            "from_bench": True,
        }
    return {}


def gsm8k_rows(now: dict[str, Any], before: dict[str, Any]) -> list[Row]:
    rows = []
    modes_now, modes_before = now.get("modes") or {}, before.get("modes") or {}
    for mode in [*modes_now, *[m for m in modes_before if m not in modes_now]]:
        a, b = modes_now.get(mode), modes_before.get(mode)
        metric = (a or b or {}).get("gate_metric", "")
        row = Row(
            figure=f"GSM8K accuracy, {mode} ({metric})",
            unit="",
            better="higher",
            before=(b or {}).get(f"{metric}_accuracy"),
            after=(a or {}).get(f"{metric}_accuracy"),
            group="quality",
        )
        if (
            a
            and b
            and a.get("per_question")
            and b.get("per_question")
            and a.get("gate_metric") == b.get("gate_metric")
        ):
            paired = paired_compare(b["per_question"], a["per_question"])
            row.beyond = paired.p_value < ALPHA and bool(paired.got_worse or paired.got_better)
            row.spread = (
                f"McNemar on {paired.questions} questions: {len(paired.got_worse)} right->wrong, "
                f"{len(paired.got_better)} wrong->right, p={paired.p_value:.3g}"
            )
            if len(a["per_question"]) != len(b["per_question"]) and paired.questions:
                # runs of different lengths (a --limit): both accuracies on the questions both answered
                row.figure += f", the {paired.questions} questions both runs answered"
                row.before = paired.before_correct / paired.questions
                row.after = paired.now_correct / paired.questions
                row.spread += (
                    f" (of {len(b['per_question'])} before and {len(a['per_question'])} now; "
                    f"accuracy on all: {_num(row_all(b, metric))} -> {_num(row_all(a, metric))})"
                )
        rows.append(row)
    return rows


def row_all(mode: dict[str, Any], metric: str) -> Any:
    return mode.get(f"{metric}_accuracy")


def needle_rows(now: dict[str, Any], before: dict[str, Any]) -> list[Row]:
    by_now = {r["length"]: r for r in now.get("by_length") or [] if isinstance(r, dict) and "length" in r}
    by_before = {
        r["length"]: r for r in before.get("by_length") or [] if isinstance(r, dict) and "length" in r
    }
    return [
        Row(
            figure=f"needle pass rate at {length:,} tokens",
            unit="",
            better="higher",
            group="quality",
            before=(by_before.get(length) or {}).get("accuracy"),
            after=(by_now.get(length) or {}).get("accuracy"),
        )
        for length in sorted({*by_now, *by_before})
    ]


def _rate_row(name: str, now: tuple[int, int] | None, before: tuple[int, int] | None) -> Row | None:
    if now is None and before is None:
        return None
    rate = lambda t: None if t is None or not t[1] else t[0] / t[1]  # noqa: E731
    return Row(figure=name, unit="", better="higher", before=rate(before), after=rate(now), group="quality")


def _count_row(name: str, now: int | None, before: int | None) -> Row | None:
    if now is None and before is None:
        return None
    return Row(figure=name, unit="", better="lower", before=before, after=now, group="quality")


def _tools(suites: dict[str, dict[str, Any]]) -> tuple[int, int] | None:
    f = suites.get("tools", {})
    return (int(f["passed"]), int(f["runs"])) if isinstance(f.get("runs"), int) and f.get("runs") else None


def _vision(suites: dict[str, dict[str, Any]]) -> tuple[int, int] | None:
    f = suites.get("vision", {})
    return (
        (int(f["correct"]), int(f["cases"])) if isinstance(f.get("cases"), int) and f.get("cases") else None
    )


def _stress_errors(suites: dict[str, dict[str, Any]]) -> int | None:
    f = suites.get("stress", {})
    return len(f["errors"]) if isinstance(f.get("errors"), list) else None


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def read_results(path: Path, kind: str = "qualify") -> tuple[dict[str, Any] | None, str | None]:
    """A qualify (or bench) results.json as a document, or why not (the one file read here: the
    caller's choice of baseline; a report must still be written when it is unreadable)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        return None, type(exc).__name__
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith(f"deploytool.{kind}"):
        return None, f"not a {kind} results.json"
    return doc, None
