"""A qualification's results: the QualifyReport the runner fills in, its verdict and exit
code, and results.json (the stable schema, docs/qualify.md). The report formats (report.py)
and the CLI read these; nothing here runs a suite or draws a page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import errors
from ..files import to_jsonable
from ..server.facts import ServerFacts
from .suite_api import SuiteResult, Verdict

EXIT_PASSED, EXIT_GATE_FAILED = 0, 1
EXIT_COULD_NOT_RUN = errors.EXIT_COULD_NOT_RUN  # not 2: that is a usage error, everywhere


@dataclass
class QualifyReport:
    url: str
    report_dir: Path
    profile: str | None
    slot: str | None = None
    release: int | None = None
    image: str | None = None
    image_labels: dict[str, str] = field(default_factory=dict)
    model: dict[str, Any] | None = None  # the weights the release serves (weights.ModelPlan.record)
    limit: int | None = None
    baseline: str | None = None  # what the gates that compare with another release were judged against
    suites: list[SuiteResult] = field(default_factory=list)
    server: ServerFacts | None = None
    started_at: str = ""
    finished_at: str | None = None
    incomplete: bool = False  # interrupted, or suites left unrun
    interrupted: bool = False  # Ctrl-C: the CLI and `up` say so and exit 130
    could_not_run: str | None = None  # why qualification could not run at all

    @property
    def passed(self) -> bool:
        """True only when nothing was left unrun and every suite that ran passed."""
        ran = [s for s in self.suites if s.verdict is not Verdict.SKIPPED]
        return (
            not self.incomplete
            and self.could_not_run is None
            and bool(ran)
            and all(s.verdict is Verdict.PASSED for s in ran)
        )

    @property
    def verdict(self) -> str:
        if self.passed:
            return "passed"
        if self.exit_code == EXIT_GATE_FAILED:
            return "failed"
        return "incomplete" if self.incomplete else "error"

    @property
    def exit_code(self) -> int:
        if self.passed:
            return EXIT_PASSED
        if self.could_not_run is not None or self.incomplete:
            return EXIT_COULD_NOT_RUN
        if any(
            s.verdict is Verdict.FAILED or (s.verdict is Verdict.ERROR and not s.reason.startswith("not run"))
            for s in self.suites
        ):
            return EXIT_GATE_FAILED  # a suite that ran and crashed or overran its budget did not pass: it ran
        return EXIT_COULD_NOT_RUN  # nothing ran: every suite skipped or not run

    def summary_line(self) -> str:
        counts: dict[str, int] = {}
        for s in self.suites:
            counts[s.verdict.value] = counts.get(s.verdict.value, 0) + 1
        parts = ", ".join(f"{n} {v}" for v, n in counts.items()) or "no suites"
        failed = [s.name for s in self.suites if s.verdict in (Verdict.FAILED, Verdict.ERROR)]
        why = f" ({', '.join(failed)})" if failed else ""
        head = f"qualify {self.verdict.upper()}: {parts}{why}"
        if self.server is not None and self.server.is_simulator:
            head += "; against the reference runtime (a simulator, not a model)"
        if self.server is not None and self.server.weight_version_changed:
            head += (
                f"; WEIGHTS CHANGED during the run (weight_version {self.server.weight_version} -> "
                f"{self.server.weight_version_at_end})"
            )
        if self.could_not_run:
            head += f"; could not run: {self.could_not_run}"
        if self.incomplete:
            head += "; INCOMPLETE"
        if self.limit is not None:
            head += f"; --limit {self.limit}"
        return f"{head}; report: {self.report_dir}"

    def suite(self, name: str) -> SuiteResult | None:
        return next((s for s in self.suites if s.name == name), None)


SCHEMA = "deploytool.qualify/v1"

# What results.json records of the server's facts (bench records its own set).
SERVER_FIELDS = (
    "url",
    "reachable",
    "ready",
    "health_status",
    "error",
    "models",
    "server_info",
    "server_info_path",
    "model_info",
    "model_info_path",
    "unauthorized",
    "waited_s",
    "weight_version",
    "weight_version_at_end",
)


def server_document(server: ServerFacts) -> dict[str, Any]:
    return {name: to_jsonable(getattr(server, name)) for name in SERVER_FIELDS}


def results_document(report: QualifyReport) -> dict[str, Any]:
    server = report.server
    return {
        "schema": SCHEMA,
        "verdict": report.verdict,
        "passed": report.passed,
        "exit_code": report.exit_code,
        "incomplete": report.incomplete,
        "could_not_run": report.could_not_run,
        "interrupted": report.interrupted,
        "summary": report.summary_line(),
        "started_at": report.started_at,
        "finished_at": report.finished_at,
        "limit": report.limit,
        "baseline": report.baseline,
        "simulator": bool(server is not None and server.is_simulator),
        "target": {
            "url": report.url,
            "profile": report.profile,
            "slot": report.slot,
            "release": report.release,
            "image": report.image,
            "image_labels": report.image_labels,
            "model": report.model,
        },
        "server": server_document(server) if server is not None else None,
        "suites": [suite_document(s) for s in report.suites],
    }


def suite_document(suite: SuiteResult) -> dict[str, Any]:
    return {
        "name": suite.name,
        "verdict": suite.verdict.value,
        "reason": suite.reason,
        "limited": suite.limited,
        "duration_s": suite.duration_s,
        "gates": to_jsonable(suite.gates),
        "figures": to_jsonable(suite.figures),
        "method": suite.method,
        "settings": suite.settings,
        "transcripts": to_jsonable(suite.transcripts),
    }
