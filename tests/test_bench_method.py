"""The bench method, prompts and formulas, without a server."""

from __future__ import annotations

import pytest

from deploytool.bench import build_method
from deploytool.bench.prompts import PromptFactory, estimate_tokens
from deploytool.bench.results import RequestRecord
from deploytool.bench.stats import aggregate_output_tps, decode_tps, pareto_front, percentile, prefill_tps
from deploytool.errors import ProfileError


def test_quick_preset_is_recorded_and_differs_from_default():
    default, quick = build_method(), build_method(quick=True)
    assert default.preset == "default" and quick.preset == "quick"
    assert quick.decode_output_tokens < default.decode_output_tokens
    assert max(quick.prefill_prompt_tokens) < max(default.prefill_prompt_tokens)
    assert default.fingerprint() != quick.fingerprint()
    # the source's published method (docs/bench.md, "The method")
    assert (default.decode_requests, default.decode_output_tokens) == (8, 1000)
    assert default.load_concurrency == [4, 8] and default.load_requests_per_slot == 4  # 16 and 32 requests
    assert default.prefill_prompt_tokens == [30_000, 120_000, 225_000] and default.prefill_prompts_each == 3


def test_profile_bench_section_then_flags():
    method = build_method(
        quick=True, profile_bench={"decode_requests": 5, "quick": {"decode_requests": 2}}, thinking=True
    )
    assert method.decode_requests == 2  # the quick sub-section wins on quick runs
    assert (
        build_method(profile_bench={"decode_requests": 5, "quick": {"decode_requests": 2}}).decode_requests
        == 5
    )
    assert method.thinking and method.sampling_temperature == 0.7
    assert build_method().sampling_temperature == 0.0


def test_unknown_profile_key_is_refused_with_its_name():
    with pytest.raises(ProfileError) as info:
        build_method(profile_bench={"decode_request": 5}, profile_name="mine")
    assert "decode_request" in str(info.value) and "unknown setting" in str(info.value)
    assert "profile 'mine'" in str(info.value) and "decode_requests" in (info.value.hint or "")
    with pytest.raises(ProfileError):
        build_method(profile_bench={"load_concurrency": [0]})


def test_fingerprint_ignores_bounds_and_seed_but_not_thinking():
    base = build_method(quick=True)
    assert (
        build_method(quick=True, seed=7, request_timeout_s=5, run_timeout_s=9).fingerprint()
        == base.fingerprint()
    )
    assert build_method(quick=True, thinking=True).fingerprint() != base.fingerprint()


def test_prompts_are_unique_and_near_the_target_length():
    factory = PromptFactory(seed=1)
    prompts = [factory.make(500, "g") for _ in range(20)]
    assert len({p.prefix for p in prompts}) == 20
    assert len({p.text[:200] for p in prompts}) == 20  # no shared leading block either
    assert all(abs(estimate_tokens(p.text) - 500) <= 2 for p in prompts)
    # the same seed gives the same nonces, but another run id keeps the prefixes apart
    again = PromptFactory(seed=1).make(500, "g")
    assert again.prefix != prompts[0].prefix and again.prefix.split()[-1] == prompts[0].prefix.split()[-1]


def _record(**kw) -> RequestRecord:
    base = {
        "phase": "decode",
        "group": "decode_c1",
        "concurrency": 1,
        "index": 0,
        "ok": True,
        "error": None,
        "status": 200,
        "prompt_prefix": "p",
        "prompt_tokens_estimated": 100,
        "prompt_tokens": 100,
        "cached_tokens": 0,
        "max_tokens": 11,
        "output_tokens": 11,
        "output_tokens_source": "usage",
        "reasoning_tokens": 0,
        "answer_tokens": 11,
        "finish_reason": "length",
        "start": 0.0,
        "first_token": 0.5,
        "first_answer": 0.5,
        "last_token": 1.5,
        "end": 1.6,
    }
    base.update(kw)
    return RequestRecord(**base)


def test_formulas():
    rec = _record()
    assert decode_tps(rec) == pytest.approx(10.0)  # (11 - 1) / (1.5 - 0.5)
    assert prefill_tps(rec) == pytest.approx(200.0)  # 100 / 0.5
    failed = _record(ok=False, error="HTTP 500: boom", output_tokens=None, start=1.6, end=3.0)
    assert decode_tps(failed) is None
    # failed requests add no tokens but keep their time in the window
    assert aggregate_output_tps([rec, failed]) == pytest.approx(11 / 3.0)
    assert percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)


def test_pareto_front():
    points = [(100, 100), (50, 300), (80, 90), (20, 310), (10, 200)]
    assert pareto_front(points) == [3, 1, 0]  # sorted by per-user speed; (80,90), (10,200) are beaten
