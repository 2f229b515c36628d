"""Where `qualify`, `bench` and `tune` keep their reports when no `--report` is given, and the listing
of every report kept there (`deploytool reports`).

A report of a slot's release goes beside that release's other state,
`slots/<slot>/releases/<N>/reports/<kind>-<UTC time>/` (the qualification `up` runs stays in
`releases/<N>/qualify/`); a report of a bare URL goes under `reports/<kind>-<UTC time>/`. So a
run never writes into whatever folder it was started from, and a later `compare` or a baseline
finds it by slot and release.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..release.state import home, instance, release_path


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")[:-4] + "Z"  # to the 1/100 s: unique per run


def default_report_dir(kind: str, *, slot: str | None = None, release: int | None = None) -> Path:
    """A fresh folder name for one report (not created: the writer creates it)."""
    if slot is not None and release is not None:
        return release_path(slot, release) / "reports" / f"{kind}-{_stamp()}"
    return _instance_home() / "reports" / f"{kind}-{_stamp()}"


def _instance_home() -> Path:
    return home() if instance() == "default" else home() / "instances" / instance()


@dataclass
class ReportEntry:
    kind: str  # qualify | bench
    slot: str | None
    release: int | None
    started_at: str
    summary: str
    path: str  # the report's folder

    def line(self) -> str:
        where = f"slot {self.slot} release {self.release}" if self.slot else "url"
        return f"{self.started_at or '?'}  {self.kind:<8} {where:<28} {self.summary}  {self.path}"


def list_reports(slot: str | None = None) -> list[ReportEntry]:
    """Every report kept under the state folder (this instance's), oldest first; `slot`: that
    slot's only. A results.json that cannot be read is listed as such, not skipped."""
    root = _instance_home()
    found = list((root / "slots").glob("*/releases/*/qualify/results.json"))
    found += list((root / "slots").glob("*/releases/*/reports/*/results.json"))
    if slot is None:
        found += list((root / "reports").glob("*/results.json"))
    entries = [_entry(path, root) for path in found]
    if slot is not None:
        entries = [e for e in entries if e.slot == slot]
    return sorted(entries, key=lambda e: (e.started_at, e.path))


def _entry(path: Path, root: Path) -> ReportEntry:
    parts = path.relative_to(root).parts
    slot, release = (parts[1], int(parts[3])) if parts[0] == "slots" and parts[3].isdigit() else (None, None)
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return ReportEntry("?", slot, release, "", f"unreadable ({type(exc).__name__})", str(path.parent))
    if not isinstance(data, dict):
        return ReportEntry("?", slot, release, "", "unreadable (not an object)", str(path.parent))
    schema = str(data.get("schema", ""))
    if schema.startswith("deploytool.qualify"):
        summary = str(data.get("summary") or data.get("verdict") or "").split("; report: ", 1)[
            0
        ]  # the path is listed
        return ReportEntry(
            "qualify", slot, release, str(data.get("started_at", "")), summary, str(path.parent)
        )
    if schema.startswith("deploytool.bench"):
        given = data.get("method")
        method: dict[str, Any] = given if isinstance(given, dict) else {}
        summary = (
            f"{method.get('workload', 'table')} workload, {method.get('preset', '?')} method, "
            f"{data.get('errors_total', 0)} of {data.get('requests_total', 0)} requests failed"
        )
        return ReportEntry("bench", slot, release, str(data.get("started_at", "")), summary, str(path.parent))
    if schema.startswith("deploytool.tune"):
        state = (
            "inconclusive"
            if data.get("inconclusive")
            else f"winner {data.get('winner')}"
            if data.get("winner")
            else "none qualifies"
        )
        summary = f"profile {data.get('profile', '?')}, {state}" + (
            ", recommended" if data.get("recommended") else ""
        )
        return ReportEntry("tune", slot, release, str(data.get("started_at", "")), summary, str(path.parent))
    return ReportEntry("?", slot, release, "", f"unknown schema {schema!r}", str(path.parent))


def newest_kept(slot: str, release: int, kind: str) -> Path | None:
    """The newest kept `kind` report's results.json of a slot's release (the folder names sort by
    their UTC time), or None."""
    kept = sorted((release_path(slot, release) / "reports").glob(f"{kind}-*/results.json"))
    return kept[-1] if kept else None
