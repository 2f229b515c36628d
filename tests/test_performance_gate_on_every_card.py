"""Every shipped card profile carries a speed gate, on by default: floors where the source
measured the card (RTX 5090), the regression gate alone elsewhere; off only in writing."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from pydantic import ValidationError

from deploytool.bench.results import Figure
from deploytool.profiles import ProfileStore
from deploytool.qualify.config import suite_settings
from deploytool.qualify.suites import performance, registry


@pytest.fixture(scope="module")
def store() -> ProfileStore:
    return ProfileStore()


def _cards(store: ProfileStore) -> list[str]:
    return [n for n in store.names() if store.get(n).match.gpu_name]


def test_there_are_card_profiles(store: ProfileStore) -> None:
    assert len(_cards(store)) >= 6


def test_every_card_profile_runs_the_performance_suite_with_a_regression_gate(store: ProfileStore) -> None:
    for name in _cards(store):
        profile = store.get(name)
        assert performance.applies_to(profile, None) is None, name
        settings = suite_settings(registry(), profile, None)["performance"]
        assert settings.enabled and settings.max_regression_pct is not None, name
        assert settings.repeats >= 3, name  # gating figures are medians over at least 3 passes


def test_rtx5090_floors_come_from_the_sources_figures_with_a_stated_margin(store: ProfileStore) -> None:
    s = suite_settings(registry(), store.get("rtx5090-qwen3.6-35b-a3b-nvfp4"), None)["performance"]
    # the source: 626 tok/s (c=1), 1,956 (c=8 total), 11.0K at 120K tokens, thinking off; floors 10% below
    for floor, measured in (
        (s.min_decode_tps_c1, 626),
        (s.min_decode_tps_c8, 1956),
        (s.min_prefill_tps_120k, 11_000),
    ):
        assert floor == pytest.approx(0.9 * measured, rel=0.01)
    assert not s.thinking


@pytest.mark.parametrize(
    "name",
    [
        "rtx-pro-6000-qwen3.6-35b-a3b-nvfp4",
        "h200-qwen3.6-35b-a3b-fp8",
        "b300x8-glm5.2-nvfp4-tp8",
        "b300x8-glm5.2-nvfp4-tep8",
        "gb300x4-glm5.2-nvfp4-tp4",
    ],
)
def test_cards_the_source_did_not_measure_carry_the_regression_gate_alone(
    store: ProfileStore, name: str
) -> None:
    s = suite_settings(registry(), store.get(name), None)["performance"]
    assert (s.min_decode_tps_c1, s.min_decode_tps_c8, s.min_prefill_tps_120k) == (None, None, None)
    assert s.max_regression_pct == 5


def test_opting_out_needs_a_reason_and_is_reported_as_the_skip_reason():
    with pytest.raises(ValidationError, match="needs a reason"):
        performance.Settings.model_validate({"enabled": False})
    performance.Settings.model_validate({"enabled": False, "reason": "shared card, benchmarked elsewhere"})
    profile = NS(
        qualify={"performance": {"enabled": False, "reason": "shared card, benchmarked elsewhere"}},
        match=NS(gpu_name=["NVIDIA GeForce RTX 5090"]),
    )
    assert "shared card, benchmarked elsewhere" in performance.applies_to(profile, None)
    # a profile for no card and without a section (a bare URL, a test profile) is not benchmarked
    assert performance.applies_to(NS(qualify={}, match=NS(gpu_name=[])), None) is not None


def _bench(values: dict[str, float], invalid: list[str] | None = None) -> NS:
    figs = [
        Figure(key=k, label=k, value=v, unit="tok/s", better="higher", completed=8, failed=0)
        for k, v in values.items()
    ]
    return NS(
        figures=figs,
        figure=lambda key: next((f for f in figs if f.key == key), None),
        invalid_groups=invalid or [],
    )


def test_floor_gates_use_the_figures_they_name():
    s = performance.Settings(min_decode_tps_c1=563, min_decode_tps_c8=1760, min_prefill_tps_120k=9900)
    gates = performance.floor_gates(_bench({"decode_c1_tps": 600, "load_c8_aggregate_tps": 1500}), s)
    assert [(g.name, g.passed) for g in gates] == [
        ("decode tok/s at concurrency 1", True),
        ("decode tok/s at concurrency 8, total", False),
        ("prefill tok/s at 120K tokens", False),
    ]  # not measured: fails, and says why
    assert "was not measured" in gates[2].detail
