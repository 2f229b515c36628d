"""What the qualify tests share: the reference runtime as the sim profile starts it, the sim
profile on a test port, and a qualification run with small data (the real defaults are for
real runs)."""

from __future__ import annotations

from pathlib import Path

from deploytool.checks.targets import Target
from deploytool.profiles import Profile, load_profile
from deploytool.qualify import run_qualification
from deploytool.sim import SimSettings, serve_in_thread

# Small data everywhere: the real defaults (225K-token needle, 1,319 questions) are for real runs.
FAST = {
    "needle": {"target_tokens": 20_000, "depths": [0.1, 0.5, 0.9]},
    "stress": {"long_prompt_tokens": 20_000, "max_tokens": 1000},
    # The sim's answer key mixes answer formats; lm-eval's last-number filter scores some wrong by
    # design, so the gate uses deploytool's scorer here, as the sim profile does.
    "gsm8k": {"min_accuracy": 0.8, "styles": ["deploytool", "lm-eval"]},
    "preflight": {"ready_timeout_s": 2},
}
OURS = ["preflight", "contract", "vision", "tools", "needle", "gsm8k", "stress"]
LIMIT = 20


# as the sim profile starts it: thinking off by default as the gateway expects, metrics and cache report on
SIM_SETTINGS = {
    "startup_seconds": 0,
    "decode_tps": 5000,
    "prefill_tps": 2_000_000,
    "log_requests": False,
    "default_chat_template_kwargs": '{"enable_thinking": false}',
    "enable_metrics": True,
    "enable_cache_report": True,
}


def sim(port: int = 0, **overrides):
    """port 0: a free one; a port given: a later release of the same slot, which keeps its port."""
    settings = {**SIM_SETTINGS, **overrides}
    return serve_in_thread(
        SimSettings(**settings), port=port, wait_ready="never_ready" not in settings.get("faults", ())
    )


def sim_profile(port: int, **model: object) -> Profile:
    """The built-in sim profile, served on a test port (the contract compares the port)."""
    profile = load_profile("sim").model_copy(deep=True)
    profile.server.port = port
    for key, value in model.items():
        setattr(profile.model, key, value)
    return profile


def qualify(
    url: str,
    tmp_path: Path,
    *,
    profile: Profile | None = None,
    suites: list[str] | None = None,
    overrides: dict | None = None,
    limit: int | None = LIMIT,
    **target_fields,
):
    merged = {k: dict(v) for k, v in FAST.items()}
    for key, value in (overrides or {}).items():
        merged.setdefault(key, {}).update(value)
    target = Target(url=url, profile=profile, **target_fields)
    return run_qualification(
        target, suites=suites or OURS, limit=limit, report_dir=tmp_path / "report", overrides=merged
    )
