"""deploytool tune: find the fastest launch that fits, holds its latency targets and qualifies
(docs/tune.md).

    outcome = tune("my-profile", local=True, slo="ttft_p99_ms=2000", report_dir=Path("reports/tune"))
"""

from __future__ import annotations

from .run import TuneOutcome, tune

__all__ = ["TuneOutcome", "tune"]
