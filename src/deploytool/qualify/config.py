"""The profile's `qualify:` section, validated per suite, with CLI overrides on top.

    qualify:
      suites: [preflight, contract, tools, gsm8k]   # default selection (else: all that apply)
      gsm8k: {min_accuracy: 0.94, concurrency: 64}  # each key: one suite's Settings model
      needle: {target_tokens: 225000}

An unknown suite name or an unknown setting is refused with the profile field that holds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..errors import FieldError, ProfileError, UsageError
from .suite_api import SuiteSettings

if TYPE_CHECKING:
    from ..profiles import Profile


def _where(profile: Profile | None) -> str:
    if profile is None:
        return "--set"
    return f"profile {profile.name!r} ({profile.source or 'built in'})"


def select_suites(
    registry: dict[str, Any], profile: Profile | None, requested: list[str] | None
) -> list[str]:
    """Suite names to run, in registry order: --suite, else the profile's qualify.suites, else
    all (a suite that does not apply is then reported as skipped, with its reason)."""
    section = profile.qualify if profile else {}
    names = requested or section.get("suites")
    if names is None:
        return list(registry)
    where = "--suite" if requested else f"{_where(profile)}: qualify.suites"
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ProfileError(f"{where}: expected a list of suite names, got {names!r}")
    unknown = [n for n in names if n not in registry]
    if unknown:
        error = UsageError if requested else ProfileError
        raise error(
            f"{where}: unknown suite(s) {', '.join(unknown)}", hint=f"known suites: {', '.join(registry)}"
        )
    return [n for n in registry if n in names]


def suite_settings(
    registry: dict[str, Any], profile: Profile | None, overrides: dict[str, dict[str, Any]] | None
) -> dict[str, SuiteSettings]:
    """Each suite's validated settings: model defaults < profile's qualify.<suite> < overrides."""
    section = dict(profile.qualify) if profile else {}
    section.pop("suites", None)
    unknown = [k for k in section if k not in registry]
    if unknown:
        raise ProfileError(
            f"{_where(profile)}: qualify.{unknown[0]}: no such suite",
            hint=f"qualify: takes 'suites' and one section per suite: {', '.join(registry)}",
        )
    for name in overrides or {}:
        if name not in registry:
            raise FieldError(
                "sets", "no such suite", value=f"{name}.…", hint=f"known suites: {', '.join(registry)}"
            )
    out: dict[str, SuiteSettings] = {}
    for name, module in registry.items():
        from_profile = section.get(name) or {}
        if not isinstance(from_profile, dict):
            raise ProfileError(
                f"{_where(profile)}: qualify.{name}: expected a mapping of settings, got {from_profile!r}"
            )
        merged = {**from_profile, **((overrides or {}).get(name) or {})}
        try:
            out[name] = module.Settings.model_validate(merged)
        except ValidationError as exc:
            lines = []
            for err in exc.errors():
                field = ".".join(str(p) for p in err["loc"])
                origin = (
                    "--set"
                    if overrides and field.split(".")[0] in (overrides.get(name) or {})
                    else _where(profile)
                )
                what = "unknown setting" if err["type"] == "extra_forbidden" else err["msg"]
                got = "" if err["type"] == "extra_forbidden" else f" (got {err.get('input')!r})"
                known = ", ".join(module.Settings.model_fields)
                lines.append(f"{origin}: qualify.{name}.{field}: {what}{got} (settings of {name}: {known})")
            raise (UsageError if origin == "--set" else ProfileError)("\n".join(lines)) from None
    return out


def parse_set_option(items: list[str] | None) -> dict[str, dict[str, Any]]:
    """`--set gsm8k.min_accuracy=0.9` (repeatable) -> {'gsm8k': {'min_accuracy': 0.9}}; values
    are read as YAML scalars/lists, so `--set needle.depths=[0.1,0.9]` works."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        suite, dot, setting = key.strip().partition(".")
        if not sep or not dot or not suite or not setting:
            raise FieldError(
                "sets", "expected SUITE.SETTING=VALUE, e.g. gsm8k.min_accuracy=0.9", value=repr(item)
            )
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            raise FieldError("sets", f"the value is not valid YAML: {exc}", value=repr(item)) from None
        out.setdefault(suite, {})[setting] = value
    return out
