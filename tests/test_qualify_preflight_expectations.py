"""A release that lost a fast path fails preflight, naming the difference (qualify.preflight.expect)."""

from __future__ import annotations

from pathlib import Path

from qualify_helpers import qualify, sim

from deploytool.qualify import Verdict
from deploytool.qualify.suites.preflight.expectations import Expectations, decode_cuda_graph_on, static_gates
from deploytool.server import metrics_window as mw
from deploytool.server.facts import parse_prometheus

EXPECT = {"speculative_algorithm": "NEXTN", "min_accept_length": 2.0, "min_kv_tokens": 262144}


def test_speculative_decoding_as_expected_passes(tmp_path: Path) -> None:
    with sim(spec_accept_length=3.2) as handle:
        report = qualify(
            handle.url, tmp_path, suites=["preflight"], overrides={"preflight": {"expect": EXPECT}}
        )
    pre = report.suite("preflight")
    assert pre.verdict is Verdict.PASSED, pre.reason
    gates = {g.name: g for g in pre.gates}
    assert gates["speculative algorithm"].measured == "EAGLE"  # NEXTN resolves to EAGLE in SGLang
    # over the window's counters: verify calls are whole steps per request, so near the sim's 3.2
    assert abs(gates["speculative accept length"].measured - 3.2) <= 0.15
    assert pre.figures["expect"]["accept_length_window"]["source"] == "metrics counters over the window"
    assert pre.figures["expect"]["accept_length_window"]["errors"] == []


def test_a_release_reporting_speculative_decoding_off_fails_preflight_naming_it(tmp_path: Path) -> None:
    with sim(spec_accept_length=3.2, faults=("spec_off",)) as handle:
        report = qualify(
            handle.url, tmp_path, suites=["preflight"], overrides={"preflight": {"expect": EXPECT}}
        )
    pre = report.suite("preflight")
    assert pre.verdict is Verdict.FAILED and report.exit_code == 1
    assert "speculative algorithm: measured None, needs == EAGLE (speculative decoding is off" in pre.reason
    # SGLang without a draft model reports no avg_spec_accept_length and exports no verify counter
    assert "speculative accept length: measured None, needs >= 2.0 (no accept length reported" in pre.reason


def test_a_smaller_kv_pool_and_other_cuda_graphs_fail_with_the_field_named(tmp_path: Path) -> None:
    with sim(max_total_tokens=200_000, context_length=131072) as handle:
        report = qualify(
            handle.url,
            tmp_path,
            suites=["preflight"],
            overrides={
                "preflight": {
                    "expect": {
                        "min_kv_tokens": 262144,
                        "decode_cuda_graph": False,
                        "moe_runner_backend": "cutlass",
                    }
                }
            },
        )
    reason = report.suite("preflight").reason
    assert "KV pool tokens (max_total_num_tokens): measured 200000, needs >= 262144" in reason
    # the sim reports 0.5.23's disable_decode_cuda_graph: false (graphs on)
    assert "CUDA graphs for decode: measured on, needs == off" in reason
    assert (
        "MoE runner backend: measured None, needs == cutlass (server info does not report moe_runner_backend)"
        in reason
    )


def test_decode_cuda_graph_is_read_from_sglangs_own_fields() -> None:
    assert (
        decode_cuda_graph_on(
            {"disable_cuda_graph": False, "cuda_graph_config": {"decode": {"backend": "full"}}}
        )[0]
        is True
    )
    assert decode_cuda_graph_on({"disable_cuda_graph": True})[0] is False
    assert decode_cuda_graph_on({"disable_cuda_graph": False, "disable_decode_cuda_graph": True})[0] is False
    assert decode_cuda_graph_on({"cuda_graph_config": '{"decode": {"backend": "disabled"}}'})[0] is False
    assert decode_cuda_graph_on({"internal_states": [{}]})[0] is None
    gates = static_gates(
        Expectations(moe_runner_backend="cutlass", decode_cuda_graph=True),
        {
            "moe_runner_backend": "flashinfer_trtllm",
            "disable_cuda_graph": False,
            "cuda_graph_backend_decode": "disabled",
        },
    )
    assert [(g.name, g.passed, g.measured) for g in gates] == [
        ("CUDA graphs for decode", False, "off"),
        ("MoE runner backend", False, "flashinfer_trtllm"),
    ]


def test_accept_length_counters_are_summed_over_label_sets() -> None:
    # the accept-length window reads /metrics through metrics_window, as bench does
    def snap(at: float, text: str) -> mw.CounterSnapshot:
        return mw.CounterSnapshot(at, mw.counters_from(parse_prometheus(text)))

    before = snap(
        0.0,
        'sglang:prompt_tokens_total{model_name="m"} 10\n'
        'sglang:generation_tokens_total{model_name="m",is_streaming="true"} 100.0\n'
        'sglang:spec_verify_calls_total{model_name="m"} 60.0\n',
    )
    after = snap(
        1.0,
        'sglang:prompt_tokens_total{model_name="m"} 20\n'
        'sglang:generation_tokens_total{model_name="m",is_streaming="true"} 300.0\n'
        'sglang:generation_tokens_total{model_name="m",is_streaming="false"} 100.0\n'
        'sglang:spec_verify_calls_total{model_name="m"} 160.0\n',
    )
    assert mw.window(before, after).spec_accept_length == 3.0  # (400 - 100) / (160 - 60)
    no_verify = snap(1.0, "sglang:prompt_tokens_total 20\nsglang:generation_tokens_total 5\n")
    assert mw.window(before, no_verify).spec_accept_length is None
