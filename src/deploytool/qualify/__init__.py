"""`deploytool qualify`: acceptance suites that gate every cutover.

    from deploytool.qualify import run_qualification
    report = run_qualification(target, report_dir=Path("my-reports/qualify"))
    report.passed, report.exit_code, report.summary_line()

The suites live one per module in `qualify/suites/` (registry in `suites/__init__.py`); their
interface and result objects are in `base.py`; docs/qualify.md describes each suite.
"""

from __future__ import annotations

from .base import Gate, SuiteContext, SuiteResult, SuiteSettings, Verdict
from .runner import QualifyReport, run_qualification

__all__ = [
    "Gate",
    "QualifyReport",
    "SuiteContext",
    "SuiteResult",
    "SuiteSettings",
    "Verdict",
    "run_qualification",
]
