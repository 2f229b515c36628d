"""performance: `deploytool bench` (the source's table) as a qualification suite.

    qualify:
      performance: {min_decode_tps_c1: 560, min_decode_tps_c8: 1760, min_prefill_tps_120k: 9900,
                    max_regression_pct: 10}
      # or, in writing: performance: {enabled: false, reason: "no GPU time for a benchmark here"}

On by default for every card profile (one whose match names a GPU) and for any profile with a
qualify.performance section; a profile opts out only with `enabled: false` and a reason.

Runs the bench method (the profile's `bench:` section applies, as for `deploytool bench`), in
`repeats` passes (at least 3 by default: every gating figure is a median with a spread), and
gates on: no failed request, a cold prefix cache, no phase left invalid by leftover work on the
server, the floors (decode at concurrency 1 and 8, prefill at 120K tokens), and no regression
against the previous release's stored run by the rule of bench/regression.py (worse than
max_regression_pct AND beyond the measured spread of both runs). The bench figures, their
per-request samples and the method are stored in this suite's figures, so the next release
compares with them; a previous run measured with another method is not compared (the reason
says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import Field, model_validator

from ...bench import BenchRun, build_method, run_bench_async
from ...bench.regression import change
from ...checks.targets import Target
from ...server.facts import ServerFacts
from ..context import SuiteContext
from ..suite_api import Gate, SuiteResult, SuiteSettings, Verdict, previous_suite

if TYPE_CHECKING:
    from ...profiles import Profile

name = "performance"

# Figures compared with the previous release by default: the headline speeds and TTFT at c=1.
DEFAULT_REGRESSION_PREFIXES = ("decode_c1_tps", "ttft_c1_s", "load_c", "prefill_")


# Floor settings -> the bench figure each one gates.
FLOORS = {
    "min_decode_tps_c1": ("decode_c1_tps", "decode tok/s at concurrency 1"),
    "min_decode_tps_c8": ("load_c8_aggregate_tps", "decode tok/s at concurrency 8, total"),
    "min_prefill_tps_120k": ("prefill_120000_tps", "prefill tok/s at 120K tokens"),
}


class Settings(SuiteSettings):
    enabled: bool = Field(default=True, description="false turns the suite off; needs a reason.")
    reason: str | None = Field(
        default=None, description="Why the suite is off (required with enabled: false)."
    )
    min_decode_tps_c1: float | None = Field(
        default=None, gt=0, description="Gate: decode tok/s of one request."
    )
    min_decode_tps_c8: float | None = Field(
        default=None, gt=0, description="Gate: total decode tok/s of 8 concurrent requests."
    )
    min_prefill_tps_120k: float | None = Field(
        default=None, gt=0, description="Gate: prefill tok/s of a 120K-token prompt."
    )
    repeats: int = Field(default=3, ge=1, description="Passes of the method; figures are medians over them.")
    max_regression_pct: float | None = Field(
        default=None, ge=0, description="Gate: worst allowed slowdown against the previous release."
    )
    regression_floor_s: float = Field(
        default=0.02,
        ge=0,
        description="A time figure (TTFT) is only a regression when also this many seconds worse: "
        "a few milliseconds of scheduling noise on a fast server is not one.",
    )
    regression_figures: list[str] | None = Field(
        default=None,
        description="Figure keys compared with the previous release (default: speeds and TTFTs).",
    )
    max_failed_requests: int = Field(default=0, ge=0, description="Gate: requests that may fail.")
    quick: bool = Field(default=False, description="The reduced method (smoke runs).")
    thinking: bool = False
    sweep: bool = False
    request_timeout_s: float = 600.0
    budget_s: float = 3600.0

    @model_validator(mode="after")
    def _off_in_writing(self) -> Settings:
        if not self.enabled and not (self.reason or "").strip():
            raise ValueError("enabled: false needs a reason (performance: {enabled: false, reason: ...})")
        return self


def applies_to(profile: Profile | None, server: ServerFacts) -> str | None:
    section = (profile.qualify if profile is not None else None) or {}
    mine = section.get("performance")
    if isinstance(mine, dict) and mine.get("enabled") is False:
        return f"turned off by the profile: {mine.get('reason')}"
    if mine is not None or "performance" in (section.get("suites") or []):
        return None
    match = profile.match if profile is not None else None
    if match is not None and match.gpu_name:
        return None  # a card profile: on by default
    return "not a card profile and no qualify.performance section"


async def run(ctx: SuiteContext[Settings]) -> SuiteResult:
    s = ctx.settings
    profile = ctx.profile
    method = build_method(
        quick=s.quick,
        profile_bench=profile.bench if profile else None,
        thinking=s.thinking,
        sweep=s.sweep,
        profile_name=profile.name if profile else None,
        request_timeout_s=s.request_timeout_s,
        repeats=s.repeats,
        # stop before the suite's budget so the figures still come back
        run_timeout_s=max(30.0, s.budget_s - 30.0),
    )
    target = ctx.target or Target(url=ctx.client.base_url, profile=profile)
    bench = await run_bench_async(target, method=method, report_dir=None, progress=False)

    result = SuiteResult(
        name=name,
        verdict=Verdict.ERROR,  # judge() sets it
        figures=stored_figures(bench),
        method=method_text(bench),
    )
    result.gates.append(
        Gate(
            name="failed requests",
            threshold=s.max_failed_requests,
            measured=bench.errors_total,
            passed=bench.errors_total <= s.max_failed_requests,
            comparison="<=",
            detail=f"of {bench.requests_total}; medians use completed requests only",
        )
    )
    result.gates.append(
        Gate.equal("prefix cache stayed cold", bench.cache_check.ok, True, detail=bench.cache_check.message)
    )
    result.gates += floor_gates(bench, s)
    result.gates.append(idle_gate(bench))
    notes: list[str] = []
    if s.max_regression_pct is not None:
        previous, why = load_previous(ctx.previous_results)
        baseline = ctx.target.baseline if ctx.target else None
        if baseline:
            result.method += f" Baseline: {baseline}."
        if previous is None:
            result.method += f" No regression check: {why or 'no previous release results'}."
        elif previous.get("bench_method_fingerprint") != bench.method_fingerprint:
            result.method += (
                " No regression check: the previous release was measured with another method "
                f"({previous.get('bench_method_fingerprint')} vs {bench.method_fingerprint})."
            )
        else:
            against = baseline.split(" (", 1)[0] if baseline else "the previous release"
            result.gates += regression_gates(
                bench,
                previous,
                s.max_regression_pct,
                s.regression_figures,
                floor_s=s.regression_floor_s,
                against=against,
            )
    if not bench.complete:
        notes.append("the benchmark was cut short by its time bound")
    return result.judge(notes)


def idle_gate(bench: BenchRun) -> Gate:
    """No phase left invalid by leftover work. Without /metrics nothing was checked: not measured,
    which fails (as the cold-cache gate does) rather than passing unseen."""
    name = "phases measured on an idle server"
    if bench.groups and all(g.server_requests is None for g in bench.groups):
        return Gate(
            name=name,
            threshold=0,
            measured=None,
            passed=False,
            comparison="<=",
            detail="not measured: the server's /metrics was unreadable, so leftover work could not be "
            "detected; start it with enable-metrics: true",
        )
    return Gate(
        name=name,
        threshold=0,
        measured=len(bench.invalid_groups),
        passed=not bench.invalid_groups,
        comparison="<=",
        detail=("invalid (leftover work on the server): " + ", ".join(bench.invalid_groups))
        if bench.invalid_groups
        else "every phase's server counters matched what it sent",
    )


def floor_gates(bench: BenchRun, s: Settings) -> list[Gate]:
    """One gate per floor the profile sets; a figure that was not measured fails its floor."""
    gates = []
    for setting, (key, label) in FLOORS.items():
        floor = getattr(s, setting)
        if floor is None:
            continue
        value = _value(bench, key)
        gates.append(
            Gate.at_least(
                label,
                None if value is None else round(value, 1),
                floor,
                detail=""
                if value is not None
                else f"{key} was not measured (check the bench method's sizes)",
            )
        )
    return gates


def stored_figures(bench: BenchRun) -> dict[str, Any]:
    """Flat figures for the report, plus what the next release needs to compare."""
    out: dict[str, Any] = {f.key: (None if f.value is None else round(f.value, 4)) for f in bench.figures}
    out.update(
        bench_method_fingerprint=bench.method_fingerprint,
        bench_method=bench.method,
        bench_figures=[
            {
                "key": f.key,
                "label": f.label,
                "value": f.value,
                "unit": f.unit,
                "better": f.better,
                "samples": f.samples,
                "spread": f.spread,
            }
            for f in bench.figures
        ],
        invalid_phases=bench.invalid_groups,
        requests=bench.requests_total,
        failed_requests=bench.errors_total,
        cache_check=bench.cache_check.message,
        cache_check_source=bench.cache_check.source,
        # /metrics counter differences per measured phase (deploytool.server.metrics_window)
        metrics_windows=bench.server.get("windows"),
        weight_version=bench.server.get("weight_version"),
        # decode's bandwidth ceiling on the card (None without a card or checkpoint config): the report draws it
        roofline=bench.roofline,
    )
    return out


def method_text(bench: BenchRun) -> str:
    m = bench.method
    return (
        f"deploytool bench, {m['preset']} method (fingerprint {bench.method_fingerprint}), "
        f"{m.get('repeats', 1)} passes (figures are medians over passes; regressions need to exceed the "
        "threshold and the measured spread, docs/bench.md): "
        f"{m['warmup_requests']} warm-up requests excluded; decode at concurrency 1 over {m['decode_requests']} "
        f"requests of {m['decode_output_tokens']} output tokens; load at {m['load_concurrency']}; prefill at "
        f"{m['prefill_prompt_tokens']} prompt tokens; unique random-prefix prompts (docs/bench.md)."
    )


def load_previous(path: Path | None) -> tuple[dict[str, Any] | None, str | None]:
    suite, why = previous_suite(path, name, lambda s: bool((s.get("figures") or {}).get("bench_figures")))
    return (suite["figures"], None) if suite is not None else (None, why)


class ComparedFigure(Protocol):
    """What the regression rule reads of a figure: a bench run's Figure, or one kept in a
    results.json (qualify/rejudge.py judges those again against another release)."""

    @property
    def key(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def value(self) -> float | None: ...

    @property
    def unit(self) -> str: ...

    @property
    def better(self) -> str: ...


class ComparedRun(Protocol):
    """A run whose figures are compared: a BenchRun, or the figures a results.json kept."""

    @property
    def figures(self) -> Sequence[ComparedFigure]: ...


def regression_gates(
    bench: ComparedRun,
    previous: dict[str, Any],
    max_pct: float,
    keys: list[str] | None,
    floor_s: float = 0.0,
    against: str = "the previous release",
) -> list[Gate]:
    """One gate per figure both runs have, by the rule of bench/regression.py: measured = how
    much worse than before in % (negative: better); a gate fails only when that exceeds max_pct
    AND the bootstrap interval of the ratio lies beyond 1 (outside the measured spread)."""
    before = {f["key"]: f for f in previous.get("bench_figures") or []}
    gates = []
    for fig in bench.figures:
        wanted = fig.key in keys if keys is not None else fig.key.startswith(DEFAULT_REGRESSION_PREFIXES)
        old = before.get(fig.key)
        if not wanted or fig.better == "neither" or old is None or not old.get("value") or fig.value is None:
            continue
        c = change(old, fig)
        regressed, why = c.regression(max_pct, floor_s)
        interval = f", ratio {c.ratio:.3f} {c.interval_text()}" if c.ratio is not None else ""
        detail = f"worse than {against} ({old['value']:.4g} -> {fig.value:.4g} {fig.unit}{interval}): {why}"
        gates.append(
            Gate(
                name=f"regression: {fig.label}",
                threshold=max_pct,
                measured=round(c.worse_pct or 0.0, 2),
                passed=not regressed,
                comparison="<=",
                detail=detail,
                unit="%",
            )
        )
    return gates


def _value(bench: BenchRun, key: str) -> float | None:
    fig = bench.figure(key)
    return None if fig is None else fig.value
