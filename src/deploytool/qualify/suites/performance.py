"""performance: `deploytool bench` as a qualification suite, when the profile asks for it.

    qualify:
      performance: {min_decode_tps_c1: 150, max_regression_pct: 5}

Runs the bench method (the profile's `bench:` section applies, as for `deploytool bench`) and
gates on: no failed request, a cold prefix cache, decode at concurrency 1 >= min_decode_tps_c1,
and no figure worse than max_regression_pct against the previous release's stored run. The bench
figures and method are stored in this suite's figures, so the next release compares with them;
a previous run measured with another method is not compared (the reason says so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from ...bench import BenchRun, build_method, run_bench_async
from ...targets import Target
from ..base import Gate, ServerInfo, SuiteContext, SuiteResult, SuiteSettings, Verdict, previous_suite

name = "performance"

# Figures compared with the previous release by default: the headline speeds and TTFT at c=1.
DEFAULT_REGRESSION_PREFIXES = ("decode_c1_tps", "ttft_c1_s", "load_c", "prefill_")


class Settings(SuiteSettings):
    min_decode_tps_c1: float | None = Field(default=None, gt=0, description="Gate: decode tok/s of one request.")
    max_regression_pct: float | None = Field(default=None, ge=0,
                                             description="Gate: worst allowed slowdown against the previous release.")
    regression_floor_s: float = Field(
        default=0.02, ge=0,
        description="A time figure (TTFT) is only a regression when also this many seconds worse: "
                    "a few milliseconds of scheduling noise on a fast server is not one.")
    regression_figures: list[str] | None = Field(
        default=None, description="Figure keys compared with the previous release (default: speeds and TTFTs).")
    max_failed_requests: int = Field(default=0, ge=0, description="Gate: requests that may fail.")
    quick: bool = Field(default=False, description="The reduced method (smoke runs).")
    thinking: bool = False
    sweep: bool = False
    request_timeout_s: float = 600.0
    budget_s: float = 3600.0


def applies_to(profile: Any, server: ServerInfo) -> str | None:
    section = getattr(profile, "qualify", None) or {}
    if "performance" in section or "performance" in (section.get("suites") or []):
        return None
    return "the profile does not ask for the benchmark (add a qualify.performance section)"


async def run(ctx: SuiteContext) -> SuiteResult:
    s: Settings = ctx.settings
    profile = ctx.profile
    method = build_method(quick=s.quick, profile_bench=profile.bench if profile else None, thinking=s.thinking,
                          sweep=s.sweep, profile_name=profile.name if profile else None,
                          request_timeout_s=s.request_timeout_s,
                          # stop before the suite's budget so the figures still come back
                          run_timeout_s=max(30.0, s.budget_s - 30.0))
    target = ctx.target or Target(url=ctx.client.base_url, profile=profile)
    bench = await run_bench_async(target, method=method, report_dir=None, progress=False)

    result = SuiteResult(name=name, verdict=Verdict.ERROR,  # judge() sets it
                         figures=stored_figures(bench), method=method_text(bench))
    result.gates.append(Gate(name="failed requests", threshold=s.max_failed_requests, measured=bench.errors_total,
                             passed=bench.errors_total <= s.max_failed_requests, comparison="<=",
                             detail=f"of {bench.requests_total}; medians use completed requests only"))
    result.gates.append(Gate.equal("prefix cache stayed cold", bench.cache_check.ok, True,
                                   detail=bench.cache_check.message))
    if s.min_decode_tps_c1 is not None:
        value = _value(bench, "decode_c1_tps")
        result.gates.append(Gate.at_least("decode tok/s at concurrency 1",
                                          None if value is None else round(value, 1), s.min_decode_tps_c1))
    notes: list[str] = []
    if s.max_regression_pct is not None:
        previous, why = load_previous(ctx.previous_results)
        if previous is None:
            result.method += f" No regression check: {why or 'no previous release results'}."
        elif previous.get("bench_method_fingerprint") != bench.method_fingerprint:
            result.method += (" No regression check: the previous release was measured with another method "
                              f"({previous.get('bench_method_fingerprint')} vs {bench.method_fingerprint}).")
        else:
            result.gates += regression_gates(bench, previous, s.max_regression_pct, s.regression_figures,
                                             floor_s=s.regression_floor_s)
    if not bench.complete:
        notes.append("the benchmark was cut short by its time bound")
    return result.judge(notes)


def stored_figures(bench: BenchRun) -> dict[str, Any]:
    """Flat figures for the report, plus what the next release needs to compare."""
    out: dict[str, Any] = {f.key: (None if f.value is None else round(f.value, 4)) for f in bench.figures}
    out.update(
        bench_method_fingerprint=bench.method_fingerprint,
        bench_method=bench.method,
        bench_figures=[{"key": f.key, "label": f.label, "value": f.value, "unit": f.unit, "better": f.better}
                       for f in bench.figures],
        requests=bench.requests_total, failed_requests=bench.errors_total,
        cache_check=bench.cache_check.message, cache_check_source=bench.cache_check.source,
        # /metrics counter differences per measured phase (deploytool.metrics_window)
        metrics_windows=bench.server.get("windows"),
        weight_version=bench.server.get("weight_version"),
    )
    return out


def method_text(bench: BenchRun) -> str:
    m = bench.method
    return (f"deploytool bench, {m['preset']} method (fingerprint {bench.method_fingerprint}): "
            f"{m['warmup_requests']} warm-up requests excluded; decode at concurrency 1 over {m['decode_requests']} "
            f"requests of {m['decode_output_tokens']} output tokens; load at {m['load_concurrency']}; prefill at "
            f"{m['prefill_prompt_tokens']} prompt tokens; unique random-prefix prompts (docs/bench.md).")


def load_previous(path: Path | None) -> tuple[dict[str, Any] | None, str | None]:
    suite, why = previous_suite(path, name, lambda s: bool((s.get("figures") or {}).get("bench_figures")))
    return (suite["figures"], None) if suite is not None else (None, why)


def regression_gates(bench: BenchRun, previous: dict[str, Any], max_pct: float,
                     keys: list[str] | None, floor_s: float = 0.0) -> list[Gate]:
    """One gate per figure both runs have: slowdown % = how much worse than before (negative:
    better), in the figure's own direction."""
    before = {f["key"]: f for f in previous.get("bench_figures") or []}
    gates = []
    for fig in bench.figures:
        wanted = fig.key in keys if keys is not None else fig.key.startswith(DEFAULT_REGRESSION_PREFIXES)
        old = before.get(fig.key)
        if not wanted or fig.better == "neither" or old is None or not old.get("value") or fig.value is None:
            continue
        change = (fig.value - old["value"]) / old["value"] * 100
        worse_pct = -change if fig.better == "higher" else change
        within_floor = fig.unit == "s" and abs(fig.value - old["value"]) < floor_s
        detail = f"% worse than the previous release ({old['value']:.4g} -> {fig.value:.4g} {fig.unit})"
        if within_floor and worse_pct > max_pct:
            detail += f"; within the {floor_s:g} s noise floor, not a regression"
        gates.append(Gate(name=f"regression: {fig.label}", threshold=max_pct, measured=round(worse_pct, 2),
                          passed=worse_pct <= max_pct or within_floor, comparison="<=", detail=detail))
    return gates


def _value(bench: BenchRun, key: str) -> float | None:
    fig = bench.figure(key)
    return None if fig is None else fig.value
