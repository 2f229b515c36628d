"""The method of one run, put together: the preset, then the profile's `bench:` section, then
the command line's flags; and the chosen workload's own settings, resolved."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..errors import ProfileError
from .method import BenchMethod
from .workloads import resolve_settings

QUICK_PRESET: dict[str, Any] = {
    "preset": "quick",
    "warmup_requests": 1,
    "warmup_output_tokens": 16,
    "decode_requests": 3,
    "decode_output_tokens": 128,
    "load_concurrency": [4],
    "load_requests_per_slot": 2,
    "load_output_tokens": 128,
    "prefill_prompt_tokens": [4000],
    "prefill_prompts_each": 2,
    "sweep_max_concurrency": 8,
    "sweep_requests_per_slot": 1,
    "sweep_output_tokens": 64,
    "run_timeout_s": 600.0,
}


def build_method(
    *,
    quick: bool = False,
    profile_bench: dict[str, Any] | None = None,
    thinking: bool | None = None,
    sweep: bool | None = None,
    profile_name: str | None = None,
    repeats: int | None = None,
    **overrides: Any,
) -> BenchMethod:
    """The method for one run: preset, then the profile's `bench:` section, then the flags.

    An unknown or ill-typed key in the profile's `bench:` section is refused with its name and
    the known keys, so a typo never silently runs the default method."""
    settings: dict[str, Any] = dict(QUICK_PRESET) if quick else {}
    section = dict(profile_bench or {})
    quick_section = section.pop("quick", None) or {}
    if not isinstance(quick_section, dict):
        raise ProfileError(f"{_where(profile_name)}bench.quick must be a mapping of method settings")
    for key in ("preset", "method_version"):
        if key in section or key in quick_section:
            raise ProfileError(f"{_where(profile_name)}bench.{key} is set by deploytool, not by a profile")
    settings.update(section)
    if quick:
        settings.update(quick_section)
    if thinking is not None:
        settings["thinking"] = thinking
    if sweep is not None:
        settings["sweep"] = sweep
    if repeats is not None:
        settings["repeats"] = repeats
    settings.update(overrides)
    try:
        method = BenchMethod.model_validate(settings)
    except ValidationError as exc:
        known = ", ".join(k for k in BenchMethod.model_fields if k not in ("preset", "method_version"))
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'bench'}: "
            + ("unknown setting" if err["type"] == "extra_forbidden" else err["msg"])
            for err in exc.errors()
        )
        raise ProfileError(
            f"{_where(profile_name)}bench method is not valid: {problems}",
            hint=f"known settings: {known} (docs/bench.md)",
        ) from None
    # The chosen workload's settings, resolved (defaults, the quick sizes on quick runs, then what
    # was given) and recorded whole, so results say exactly what ran.
    try:
        resolved = resolve_settings(
            method.workload, method.preset, method.workload_settings.get(method.workload)
        )
    except ValueError as exc:
        raise ProfileError(
            f"{_where(profile_name)}bench method is not valid: workload_settings: {exc}",
            hint="docs/bench.md lists each workload's settings",
        ) from None
    method.workload_settings = {method.workload: resolved}
    return method


def _where(profile_name: str | None) -> str:
    return f"profile {profile_name!r}: " if profile_name else ""
