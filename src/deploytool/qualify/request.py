"""What `qualify` is asked to do: one frozen request, built where the options are read (the CLI)
and checked there, so that the library takes typed values and says which field it could not use.

    from deploytool.checks.targets import TargetRequest
    from deploytool.qualify.request import QualifyRequest, qualify
    report = qualify(QualifyRequest(TargetRequest(url="http://127.0.0.1:30000"), suites=("preflight",)))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checks.targets import Target, TargetRequest, resolve_target
from ..errors import FieldError

if TYPE_CHECKING:
    from .results import QualifyReport
    from .runner import QualifyReporter


@dataclass(frozen=True)
class QualifyRequest:
    """One `qualify`: the endpoint (`target`), which suites, how far, where the report goes, and
    the suites' settings given beside the profile's."""

    target: TargetRequest
    suites: tuple[str, ...] | None = None  # None: the profile's qualify.suites, else all that apply
    limit: int | None = None  # a cap on the items of data-driven suites (a quick run)
    report_dir: Path | None = None  # None: under the state folder, beside the slot's release
    # suite -> setting -> value, as qualify/config.py's parse_set_option reads `--set`
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ready_timeout_s: float | None = None  # None: the profile's preflight setting

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise FieldError("limit", "expected a positive number of items", value=str(self.limit))

    def settings_overrides(self) -> dict[str, dict[str, Any]]:
        """The overrides as the runner takes them, the ready timeout as the preflight suite's own
        setting (under the name bench uses too)."""
        merged = {suite: dict(settings) for suite, settings in self.overrides.items()}
        if self.ready_timeout_s is not None:
            merged.setdefault("preflight", {})["ready_timeout_s"] = self.ready_timeout_s
        return merged


def qualify(request: QualifyRequest, *, reporter: QualifyReporter | None = None) -> QualifyReport:
    """Find the endpoint, run the suites against it, write the report (see
    QualifyReport.exit_code for 0/1/6)."""
    from .runner import run_qualification

    target = resolve_target(request.target)
    return run_qualification(
        target,
        suites=list(request.suites) if request.suites is not None else None,
        limit=request.limit,
        report_dir=request.report_dir or default_report_dir(target),
        overrides=request.settings_overrides(),
        reporter=reporter,
    )


def default_report_dir(target: Target) -> Path:
    """Under the state folder, beside the slot's release when there is one."""
    from ..checks.reports import default_report_dir as folder

    return folder(
        "qualify",
        slot=target.release.slot if target.release else None,
        release=target.release.release if target.release else None,
    )
