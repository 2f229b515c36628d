"""`deploytool qualify`: acceptance suites that gate every cutover.

    from deploytool.qualify import run_qualification
    report = run_qualification(target, report_dir=Path("my-reports/qualify"))
    report.passed, report.exit_code, report.summary_line()

The suites live one per module or package in `qualify/suites/` (registry in `suites/__init__.py`),
each with the helpers only it uses; their interface and verdicts are in `suite_api.py`, the
context a suite runs in in `context.py`, transcripts in `transcripts.py`; docs/qualify.md
describes each suite.
"""

from __future__ import annotations

from .context import SuiteContext
from .runner import QualifyReport, run_qualification
from .suite_api import Gate, SuiteResult, SuiteSettings, Verdict

__all__ = [
    "Gate",
    "QualifyReport",
    "SuiteContext",
    "SuiteResult",
    "SuiteSettings",
    "Verdict",
    "run_qualification",
]
