"""deploytool tune: find the fastest launch that fits, holds its latency targets and qualifies
(docs/tune.md).

    request = TuneRequest("my-profile", local=True, slo=parse_slo("ttft_p99_ms=2000"),
                          report_dir=Path("reports/tune"))
    outcome = tune(request)
"""

from __future__ import annotations

from .request import TuneRequest
from .run import TuneOutcome, tune

__all__ = ["TuneOutcome", "TuneRequest", "tune"]
