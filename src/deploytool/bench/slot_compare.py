"""The source's two-card comparison: the same release on two slots, side by side.

"Same image, same tests": each slot's qualification (the results its release recorded when it
was cut over) and a fresh bench of both, their passes interleaved (A B, B A, ...) so drift of
the host hits both alike, once with thinking off and once with it on. The table is the
source's: 1 / 4 / 8 requests with thinking off and on, prefill at two lengths, with each
slot's power limit and PCIe link beside the figures. A difference counts as beyond the
measured spread only when the two slots' ranges over passes do not overlap; with one pass
there is no spread, and the comparison says so rather than guess.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..checks.targets import Target, qualify_results_path
from ..errors import UsageError

# The source's lengths ("prefill at 120K / 225K"); the quick method's, sized for a CPU.
SOURCE_PREFILL = [120_000, 225_000]
QUICK_PREFILL = [2_000, 8_000]
CONCURRENCY = [4, 8]  # with the one-request decode: the source's "1 / 4 / 8 requests"


@dataclass
class SlotSide:
    slot: str
    release: int | None
    profile: str | None
    image: str | None
    url: str
    cards: list[dict[str, Any]] = field(default_factory=list)  # name, uuid, power_limit_w, pcie
    qualify: dict[str, Any] | None = None  # {verdict, passed, summary, suites: [{name, verdict}], results}

    @property
    def heading(self) -> str:
        """'gpu-5090a001: 600 W, PCIe 5.0 x16' as the source heads its columns."""
        if not self.cards:
            return f"{self.slot}: no card (reference runtime)"
        return f"{self.slot}: " + " + ".join(
            f"{_watts(c.get('power_limit_w'))}, {c.get('pcie_now') or 'PCIe ?'}" for c in self.cards
        )


@dataclass
class SlotRow:
    key: str  # the bench figure's key
    label: str
    thinking: str  # "off" or "on"
    unit: str
    values: list[float | None]  # slot A, slot B
    spreads: list[list[float] | None]  # each slot's [min, max] over passes
    difference_pct: float | None  # (B - A) / A x 100
    beyond_spread: bool | None  # None: fewer than two passes on a side, no spread to judge by


@dataclass
class SlotComparison:
    sides: list[SlotSide]
    same_image: bool
    rows: list[SlotRow]
    repeats: int
    preset: str
    prefill_tokens: list[int]
    warnings: list[str] = field(default_factory=list)

    def row(self, key: str, thinking: str = "off") -> SlotRow | None:
        return next((r for r in self.rows if r.key == key and r.thinking == thinking), None)

    def lines(self) -> list[str]:
        """The comparison in words (what `compare` prints and keeps as slots.md): the slots and
        their cards, the table, which differences are beyond the spread, and how it was measured."""
        a, b = self.sides
        out = [
            f"the same release on two slots: {a.image} ({a.profile})"
            if self.same_image
            else f"two slots, two images: {a.image} ({a.profile}) and {b.image} ({b.profile})"
        ]
        for name, side in (("A", a), ("B", b)):
            cards = (
                "; ".join(f"{c['name']} {c['uuid']}, {c['power_limit_w']} W, {c['pcie']}" for c in side.cards)
                or "no card (reference runtime)"
            )
            out.append(f"  {name}: slot {side.slot}, release {side.release} at {side.url}: {cards}")
        out += [f"warning: {w}" for w in self.warnings] + [""] + self.table_lines()
        out += ["* beyond the measured spread: the two slots' ranges over passes do not overlap", ""]
        out += self.verdict_lines()
        out.append(
            f"measured: {self.preset} method, {self.repeats} passes per slot, interleaved "
            "(A B, B A, ...), thinking off then on; prefill measured with thinking off"
        )
        return out

    def table_lines(self) -> list[str]:
        """The source's table, its rows and columns, with the difference and the spread verdict."""
        a, b = self.sides
        release = f"release {a.release}" if a.release == b.release else f"releases {a.release} / {b.release}"
        profiles = a.profile if a.profile == b.profile else f"{a.profile} / {b.profile}"
        out = [f"| {release} ({profiles}) | {a.heading} | {b.heading} | B against A |", "|---|---|---|---|"]
        decode = ["decode_c1_tps"] + [f"load_c{c}_aggregate_tps" for c in CONCURRENCY]
        for thinking in ("off", "on"):
            rows = [self.row(k, thinking) for k in decode]
            if any(rows):
                out.append(
                    self._line(f"1 / {' / '.join(map(str, CONCURRENCY))} requests, thinking {thinking}", rows)
                )
        prefill = [self.row(f"prefill_{n}_tps") for n in self.prefill_tokens]
        if any(prefill):
            out.append(
                self._line(
                    f"prefill at {' / '.join(_tokens(n) for n in self.prefill_tokens)}",
                    prefill,
                    thousands=True,
                )
            )
        out.append(f"| qualify | {_qualify_text(a.qualify)} | {_qualify_text(b.qualify)} | |")
        return out

    def verdict_lines(self) -> list[str]:
        """Which differences are beyond the measured spread, and how many are within it."""
        a, b = self.sides
        beyond = [r for r in self.rows if r.beyond_spread]
        within = [r for r in self.rows if r.beyond_spread is False]
        unjudged = [r for r in self.rows if r.beyond_spread is None and r.difference_pct is not None]
        out = []
        for r in beyond:
            out.append(
                f"beyond the measured spread: {r.label}, thinking {r.thinking}: {b.slot} {_pct(r.difference_pct)} "
                f"against {a.slot} (passes {_range(r.spreads[0])} on {a.slot}, {_range(r.spreads[1])} on {b.slot})"
            )
        if within:
            out.append(
                f"within the measured spread ({len(within)} figures): "
                + ", ".join(f"{r.label} ({r.thinking}) {_pct(r.difference_pct)}" for r in within)
            )
        if unjudged:
            out.append(
                f"not judged ({len(unjudged)} figures): fewer than two passes, so no spread was measured"
            )
        return out

    def _line(self, label: str, rows: list[SlotRow | None], *, thousands: bool = False) -> str:
        def cell(side: int) -> str:
            return " / ".join(_figure(r.values[side] if r else None, thousands) for r in rows)

        diffs = " / ".join(
            (
                "–"
                if r is None or r.difference_pct is None
                else _pct(r.difference_pct) + ("*" if r.beyond_spread else "")
            )
            for r in rows
        )
        return f"| {label} | {cell(0)} | {cell(1)} | {diffs} |"


def compare_slots(
    targets: list[Target],
    *,
    quick: bool = False,
    repeats: int | None = None,
    prefill_tokens: list[int] | None = None,
    inventory: Any = None,
) -> tuple[SlotComparison, list[Any]]:
    """Measure both slots (thinking off, then on, each interleaved) and put them side by side
    with their qualification. Returns the comparison and the four bench runs (A/B off, A/B on)."""
    from .interleave import run_interleaved
    from .presets import build_method

    if len(targets) != 2:
        raise UsageError(
            "compare takes two slots: the same release on two slots, side by side",
            hint="deploytool compare --gpu UUID_A --gpu UUID_B (or --cpu-slot a --cpu-slot b)",
        )
    sides = [describe_side(t, inventory) for t in targets]
    warnings = same_release_warnings(targets, sides)
    profile = targets[0].profile
    lengths = list(prefill_tokens or (QUICK_PREFILL if quick else SOURCE_PREFILL))
    runs, rows = [], []
    for thinking in ("off", "on"):
        # Prefill does not depend on sampling: it is measured once, with thinking off.
        method = build_method(
            quick=quick,
            profile_bench=profile.bench if profile else None,
            thinking=thinking == "on",
            profile_name=profile.name if profile else None,
            load_concurrency=CONCURRENCY,
            prefill_prompt_tokens=lengths if thinking == "off" else [],
            repeats=repeats,
        )
        run_a, run_b, _ = run_interleaved(targets[0], targets[1], method)
        runs += [run_a, run_b]
        rows += _rows(run_a, run_b, thinking)
        for side, run in zip(sides, (run_a, run_b), strict=True):
            if run.errors_total:
                warnings.append(
                    f"{side.slot}, thinking {thinking}: {run.errors_total} of {run.requests_total} "
                    "requests failed; its figures use completed requests only"
                )
    same = bool(sides[0].image) and sides[0].image == sides[1].image
    return SlotComparison(
        sides=sides,
        same_image=same,
        rows=rows,
        repeats=runs[0].method.get("repeats", 1),
        preset=str(runs[0].method.get("preset")),
        prefill_tokens=lengths,
        warnings=warnings,
    ), runs


def describe_side(target: Target, inventory: Any = None) -> SlotSide:
    """The slot, its release, its cards (power limit and PCIe link from NVML) and the
    qualification its release recorded."""
    release = target.release
    side = SlotSide(
        slot=target.slot.name if target.slot else target.url,
        release=release.release if release else None,
        profile=release.profile if release else (target.profile.name if target.profile else None),
        image=release.image if release else None,
        url=target.url,
    )
    uuids = list(release.gpus) if release else []
    if uuids:
        if inventory is None:
            from ..host.gpus import read_inventory

            inventory = read_inventory()
        for uuid in uuids:
            card = inventory.by_uuid(uuid) if not inventory.error else None
            side.cards.append(
                {
                    "uuid": uuid,
                    "name": card.name if card else None,
                    "power_limit_w": card.power_limit_w if card else None,
                    "pcie_now": card.pcie_now() if card else None,
                    "pcie": card.pcie_text() if card else None,
                }
            )
    path = qualify_results_path(target.slot, release.release) if target.slot and release else None
    if path is not None:
        data = json.loads(Path(path).read_text())
        side.qualify = {
            "verdict": data.get("verdict"),
            "passed": data.get("passed"),
            "summary": data.get("summary"),
            "suites": [{"name": s["name"], "verdict": s["verdict"]} for s in data.get("suites", [])],
            "results": str(path),
        }
    return side


def same_release_warnings(targets: list[Target], sides: list[SlotSide]) -> list[str]:
    """Where the two slots serve more than one release's worth of difference: another image,
    other launch settings. Said, not refused: the figures then compare those too."""
    a, b = sides
    out = []
    if a.image and b.image and a.image != b.image:
        out.append(
            f"not the same image: slot {a.slot} serves {a.image}, slot {b.slot} serves {b.image}; "
            "the figures compare the images as well as the slots"
        )
    pa, pb = targets[0].profile, targets[1].profile
    if pa is not None and pb is not None and pa.name != pb.name:
        args_a, args_b = pa.launch_args(), pb.launch_args()
        differ = sorted(k for k in set(args_a) | set(args_b) if args_a.get(k) != args_b.get(k))
        out.append(
            f"the slots serve different profiles ({pa.name}, {pb.name}): the figures compare their launch "
            "settings as well as the cards"
            + (
                ": " + ", ".join(f"{k} {args_a.get(k)!r} vs {args_b.get(k)!r}" for k in differ)
                if differ
                else ""
            )
        )
    for side in sides:
        if side.qualify is None:
            out.append(
                f"slot {side.slot}: its release has no qualification recorded (started with --skip-qualify?)"
            )
    return out


def _rows(run_a: Any, run_b: Any, thinking: str) -> list[SlotRow]:
    rows = []
    for fig_a in run_a.figures:
        if not fig_a.key.endswith("_tps") or fig_a.key.startswith("sweep") or "per_request" in fig_a.key:
            continue
        fig_b = run_b.figure(fig_a.key)
        if fig_b is None:
            continue
        values = [fig_a.value, fig_b.value]
        spread_a = fig_a.spread if len(fig_a.repeat_values) > 1 else None
        spread_b = fig_b.spread if len(fig_b.repeat_values) > 1 else None
        spreads = [spread_a, spread_b]
        diff = (values[1] - values[0]) / values[0] * 100 if values[0] and values[1] is not None else None
        beyond = (
            None
            if spread_a is None or spread_b is None
            else (spread_a[1] < spread_b[0] or spread_b[1] < spread_a[0])
        )
        rows.append(
            SlotRow(
                key=fig_a.key,
                label=fig_a.label,
                thinking=thinking,
                unit=fig_a.unit,
                values=values,
                spreads=spreads,
                difference_pct=None if diff is None else round(diff, 2),
                beyond_spread=beyond,
            )
        )
    return rows


def _watts(value: Any) -> str:
    return "? W" if value is None else f"{value:g} W"


def _figure(value: float | None, thousands: bool) -> str:
    if value is None:
        return "–"
    if thousands and value >= 1000:
        return f"{value / 1000:.3g}K"
    return f"{value:,.0f}"


def _tokens(n: int) -> str:
    return f"{n // 1000}K" if n >= 1000 and n % 1000 == 0 else f"{n:,}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}%"


def _range(spread: list[float] | None) -> str:
    return "?" if not spread else f"{spread[0]:,.0f}-{spread[1]:,.0f}"


def _qualify_text(qualify: dict[str, Any] | None) -> str:
    if qualify is None:
        return "not qualified"
    suites = ", ".join(f"{s['name']} {s['verdict']}" for s in qualify["suites"])
    return f"{qualify['verdict']} ({suites})" if suites else str(qualify["verdict"])
