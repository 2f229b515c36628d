"""`deploytool report RELEASE [--against RELEASE]`: the cutover report for any two releases of a
slot, or any two report folders, written afterwards from what their qualifications stored.

A release number names that release's stored qualification (`releases/<N>/qualify/`, the one
`up` runs; else its newest kept `qualify` report). Without --against a release is compared with
the baseline the performance gate would choose (checks/targets.py `baseline_release`); a
report folder needs --against.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..checks.reports import default_report_dir, newest_kept
from ..checks.targets import baseline_release, qualify_results_path, unqualified
from ..errors import FieldError, UsageError
from ..files import write_json
from ..host.slots import Slot
from ..release.state import release_path
from .cutover import read_results, short_name
from .rejudge import qualified_against, rejudge
from .report import Against, write_report_files
from .runner import kept_bench


@dataclass
class Side:
    """One side of the comparison: its results.json document, release record and a name."""

    doc: dict[str, Any]
    record: dict[str, Any]
    name: str
    release: int | None = None
    results: Path | None = None


@dataclass
class ReleaseReport:
    folder: Path
    headline: str
    release: str
    against: str | None

    def last_line(self) -> str:
        return f"{self.headline}; report: {self.folder / 'report.html'}"


def write_release_report(
    release: str, against: str | None, slot: Slot | None, out: Path | None = None
) -> ReleaseReport:
    """Write report.md, report.html, comparison.json and sources.json (the two results.json) into `out`
    (default: beside the release's other reports, or under the state folder's reports/)."""
    current = resolve_side(release, slot)
    notes: list[str] = []
    base: Side | None
    if against is not None:
        base = resolve_side(against, slot)
        base_name = base.name + " (--against)"
    elif current.release is not None and slot is not None:
        base, base_name, notes = _rule_baseline(slot, current.release)
    else:
        raise FieldError(
            "against",
            f"{release} is a report folder: give another folder, or a release of the slot, to compare it with",
        )
    if base is not None and current.results is not None and base.results == current.results:
        raise FieldError("against", "that is the release being reported", value=str(against))
    folder = out or default_report_dir(
        "report", slot=slot.name if slot and current.release is not None else None, release=current.release
    )
    folder.mkdir(parents=True, exist_ok=True)
    # where the figures are (not a copy: `deploytool reports` lists each qualification once)
    write_json(
        folder / "sources.json",
        {"release": str(current.results), "against": str(base.results) if base else None},
    )
    doc, qualified = judged(current.doc, base.doc if base else None, base_name)
    write_report_files(
        doc,
        folder,
        Against(
            doc=base.doc if base else None,
            name=base_name if base else None,
            qualified=qualified,
            notes=notes,
            record=current.record,
            baseline_record=base.record if base else {},
            bench=kept_bench(slot.name if slot else None, current.release),
            baseline_bench=kept_bench(slot.name if slot else None, base.release if base else None),
        ),
    )
    headline = json.loads((folder / "comparison.json").read_text())["headline"]
    return ReleaseReport(
        folder=folder, headline=headline, release=current.name, against=base_name if base else None
    )


def judged(
    doc: dict[str, Any], base: dict[str, Any] | None, base_name: str
) -> tuple[dict[str, Any], str | None]:
    """The release's results with its comparing gates judged against the baseline of this page, and,
    when that changes its basis or its verdict, the stored verdict and what it was judged against."""
    if base is None:
        return doc, None
    again = rejudge(doc, base, short_name(base_name))
    if again is None:
        return doc, None
    own = qualified_against(doc)
    if short_name(own) == short_name(base_name) and again.get("verdict") == doc.get("verdict"):
        return doc, None
    return (
        again,
        f"{str(doc.get('verdict', '?')).upper()}, against {short_name(own) if own else 'a baseline it did not record'}",
    )


def resolve_side(spec: str, slot: Slot | None) -> Side:
    """A release number of `slot`, or a folder holding a qualify results.json (or the file)."""
    if spec.isdigit() and not Path(spec).is_dir():
        if slot is None:
            raise UsageError(
                f"{spec}: a release number needs its slot (--cpu, --cpu-slot NAME or --gpu UUID)"
            )
        number = int(spec)
        path = qualify_results_path(slot, number) or _newest_kept(slot, number)
        if path is None:
            raise UsageError(
                f"slot {slot.name} has no stored qualify results for release {number}: "
                + unqualified(slot.name, number).split(": ", 1)[0],
                hint="`deploytool reports` lists the reports kept per slot and release",
            )
        return _side(path, f"release {number}", number, _record(release_path(slot.name, number)))
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "results.json"
    if not path.is_file():
        raise UsageError(
            f"{spec}: neither a release number of a slot nor a report folder with a results.json"
        )
    # a report kept under a release (releases/<N>/qualify or releases/<N>/reports/<run>) has its record near it
    record = next((r for r in (_record(path.parent.parent), _record(path.parent.parent.parent)) if r), {})
    return _side(path, str(path.parent), None, record)


def _side(path: Path, name: str, number: int | None, record: dict[str, Any]) -> Side:
    doc, why = read_results(path)
    if doc is None:
        raise UsageError(f"{path}: cannot be read as qualify results ({why})")
    return Side(doc=doc, record=record, name=name, release=number, results=path)


def _rule_baseline(slot: Slot, number: int) -> tuple[Side | None, str, list[str]]:
    # the rule reads the journal first; its fallback (the newest older release) needs only the
    # numbers, which the state folder keeps for every release `up` made, running or not
    folder = release_path(slot.name, number).parent
    numbers = sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []
    chosen = baseline_release(slot, [SimpleNamespace(release=n) for n in numbers], number)  # type: ignore[misc]  # the rule reads only .release of each
    results = chosen.results or (_newest_kept(slot, chosen.release) if chosen.release is not None else None)
    if results is None:
        return (
            None,
            chosen.describe(),
            [unqualified(slot.name, chosen.release)] if chosen.release is not None else [],
        )
    assert chosen.release is not None
    return (
        _side(
            results,
            f"release {chosen.release}",
            chosen.release,
            _record(release_path(slot.name, chosen.release)),
        ),
        chosen.describe(),
        [],
    )


def _newest_kept(slot: Slot, number: int) -> Path | None:
    return newest_kept(slot.name, number, "qualify")


def _record(folder: Path) -> dict[str, Any]:
    try:
        record = json.loads((folder / "release.json").read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
