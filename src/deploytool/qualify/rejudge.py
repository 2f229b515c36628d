"""A qualification's comparing gates judged again against another release's stored results.

Two kinds of gate compare with another release: the performance suite's regression gates (the
rule of bench/regression.py on the stored per-request samples) and the contract suite's served
name, port and context length. `deploytool report N --against M` judges them against M, so the
verdict on its page is the one M gives, not the one release N's qualification gave against the
release it replaced; the other gates (floors, answers, errors) depend on no other release and
stay as measured. Pure: two results.json documents in, a new one out.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from ..files import to_jsonable

CONTRACT_KEYS = ("served_model_name", "port", "context_length")
_REGRESSION = "regression: "


@dataclass(frozen=True)
class _KeptFigure:
    """A performance figure as results.json keeps it (the suite's `bench_figures`): what the
    regression rule reads of it (qualify/suites/performance.py ComparedFigure)."""

    key: str
    label: str
    value: float | None
    unit: str
    better: str
    samples: list[list[float]] | None  # what change() resamples (bench/regression.py)

    @classmethod
    def read(cls, kept: dict[str, Any]) -> _KeptFigure:
        """From its dict; the other keys a figure may carry (spread, repeats) are not read."""
        return cls(
            key=kept["key"],
            label=kept.get("label", ""),
            value=kept.get("value"),
            unit=kept.get("unit", ""),
            better=kept.get("better", "neither"),
            samples=kept.get("samples"),
        )


@dataclass(frozen=True)
class _KeptRun:
    figures: list[_KeptFigure]


def rejudge(doc: dict[str, Any], baseline: dict[str, Any], against: str) -> dict[str, Any] | None:
    """`doc` with its comparing gates judged against `baseline` (named `against`: "release 3"),
    its suites' and its own verdict from them; None when none of its gates compares with
    another release (its verdict then depends on no baseline)."""
    new = copy.deepcopy(doc)
    touched = False
    for suite in new.get("suites") or []:
        if not isinstance(suite, dict) or suite.get("verdict") not in ("passed", "failed"):
            continue
        name = suite.get("name")
        judges = {"performance": _performance, "contract": _contract}
        judge = judges.get(name) if isinstance(name, str) else None
        if judge is not None and judge(suite, _suite(baseline, suite["name"]), against):
            touched = True
    if not touched:
        return None
    _overall(new)
    return new


def qualified_against(doc: dict[str, Any]) -> str | None:
    """What a qualification's comparing gates were judged against, as it recorded it: results.json's
    `baseline` (or, in one written before that field, the performance method's "Baseline: ...")."""
    if isinstance(doc.get("baseline"), str):
        return doc["baseline"]
    for suite in doc.get("suites") or []:
        found = re.search(r" Baseline: (.+?)\.(?: |$)", str((suite or {}).get("method") or ""))
        if found:
            return found.group(1)
    return None


def _suite(doc: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((s for s in doc.get("suites") or [] if isinstance(s, dict) and s.get("name") == name), None)


def _performance(suite: dict[str, Any], before: dict[str, Any] | None, against: str) -> bool:
    from .suites.performance import regression_gates

    settings = suite.get("settings") or {}
    max_pct = settings.get("max_regression_pct")
    if max_pct is None:
        return False
    figures = suite.get("figures") or {}
    kept = [g for g in suite.get("gates") or [] if not str(g.get("name", "")).startswith(_REGRESSION)]
    prior = (before or {}).get("figures") or {}
    if not prior.get("bench_figures") or prior.get("bench_method_fingerprint") != figures.get(
        "bench_method_fingerprint"
    ):
        suite["gates"] = kept  # nothing of the baseline to compare with: no regression gate
        suite["rejudged"] = f"no regression check against {against}: " + (
            "it has no performance figures"
            if not prior.get("bench_figures")
            else "it was measured with another method"
        )
    else:
        now = _KeptRun([_KeptFigure.read(f) for f in figures.get("bench_figures") or []])
        gates = regression_gates(
            now,
            prior,
            max_pct,
            settings.get("regression_figures"),
            floor_s=settings.get("regression_floor_s", 0.0),
            against=against,
        )
        suite["gates"] = kept + to_jsonable(gates)
        suite["rejudged"] = f"regression gates judged against {against}"
    _judge(suite)
    return True


def _contract(suite: dict[str, Any], before: dict[str, Any] | None, against: str) -> bool:
    measured = (suite.get("figures") or {}).get("measured") or {}
    prior = ((before or {}).get("figures") or {}).get("measured")
    if not isinstance(prior, dict):
        return False
    gates = []
    for gate in suite.get("gates") or []:
        key = gate.get("name")
        if key in CONTRACT_KEYS:
            if prior.get(key) is None:
                continue
            gate = {
                **gate,
                "measured": measured.get(key),
                "threshold": prior[key],
                "passed": measured.get(key) == prior[key],
                "detail": f"compared with {against}",
            }
        gates.append(gate)
    suite["gates"] = gates
    suite["rejudged"] = f"served name, port and context length compared with {against}"
    _judge(suite)
    return True


def _judge(suite: dict[str, Any]) -> None:
    """The suite's verdict from its gates, as SuiteResult.judge sets it; a suite that failed for
    a reason no gate holds (a benchmark cut short) stays failed."""
    failed = [g for g in suite.get("gates") or [] if not g.get("passed")]
    texts = [
        f"{g['name']}: measured {g.get('measured')}{g.get('unit', '')}, needs {g.get('comparison', '')} "
        f"{g.get('threshold')}{g.get('unit', '')}" + (f" ({g['detail']})" if g.get("detail") else "")
        for g in failed
    ]
    if texts:
        suite["verdict"], suite["reason"] = "failed", "; ".join(texts)
    elif suite.get("verdict") == "failed" and not _failed_only_by_comparing(suite):
        return
    else:
        suite["verdict"], suite["reason"] = "passed", ""


def _failed_only_by_comparing(suite: dict[str, Any]) -> bool:
    parts = [p for p in str(suite.get("reason") or "").split("; ") if p]
    return all(p.startswith(_REGRESSION) or p.split(":", 1)[0] in CONTRACT_KEYS for p in parts)


def _overall(doc: dict[str, Any]) -> None:
    if doc.get("incomplete") or doc.get("could_not_run"):
        return
    ran = [s for s in doc.get("suites") or [] if s.get("verdict") != "skipped"]
    if ran and all(s.get("verdict") == "passed" for s in ran):
        doc.update(verdict="passed", passed=True, exit_code=0)
    elif any(s.get("verdict") == "failed" for s in ran):
        doc.update(verdict="failed", passed=False, exit_code=1)
