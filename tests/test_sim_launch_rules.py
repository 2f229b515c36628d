"""The reference runtime's speed and pool answer its launch flags by the rules of docs/sim.md
("Launch flags and speed"): worked by hand here, so a search over launches has a known optimum."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from deploytool.sim import SimSettings, serve_in_thread
from deploytool.sim.engine import Engine, Slot

GIB = 1 << 30


def _speed(settings: SimSettings, running: int) -> float:
    engine = Engine(settings)
    engine.running = [Slot(prompt_tokens=10) for _ in range(running)]
    return engine.speed(engine.running[0])


def test_without_the_new_flags_speed_is_unchanged() -> None:
    s = SimSettings(decode_tps=100.0)
    assert [_speed(s, n) for n in (1, 8, 64)] == [100.0, 100.0, 100.0]


def test_a_batch_over_the_graph_limit_runs_eager() -> None:
    s = SimSettings(decode_tps=100.0, cuda_graph_max_bs=4, eager_decode_factor=0.5)
    assert _speed(s, 4) == pytest.approx(100.0)
    assert _speed(s, 5) == pytest.approx(50.0)
    off = SimSettings(decode_tps=100.0, disable_cuda_graph=True, eager_decode_factor=0.5)
    assert _speed(off, 1) == pytest.approx(50.0)


def test_speculative_decoding_helps_alone_and_hurts_a_full_batch() -> None:
    # k = min(3 steps, 4 draft tokens - 1) = 3; accept length 1 + .8 + .64 + .512 = 2.952
    s = SimSettings(
        decode_tps=100.0,
        spec_accept_rate=0.8,
        speculative_num_steps=3,
        speculative_num_draft_tokens=4,
        spec_draft_cost=0.1,
        spec_verify_cost=0.05,
    )
    assert s.spec_accept_length == pytest.approx(2.952)
    assert _speed(s, 1) == pytest.approx(100 * 2.952 / (1 + 0.3 + 0.15))
    assert _speed(s, 32) == pytest.approx(100 * 2.952 / (1 + 0.3 + 0.05 * 3 * 32))
    assert _speed(s, 32) < 100.0 < _speed(s, 1)
    capped = SimSettings(
        decode_tps=100.0, spec_accept_rate=0.8, speculative_num_steps=3, speculative_num_draft_tokens=2
    )
    assert capped.spec_accept_length == pytest.approx(1.8)  # one draft step only


def test_memory_fraction_sizes_the_pool() -> None:
    s = SimSettings(
        gpu_memory_gib=80.0, weights_gib=20.0, kv_bytes_per_token=1 << 16, mem_fraction_static=0.5
    )
    assert s.max_total_tokens == (80 * 0.5 - 20) * GIB // (1 << 16)  # 327,680
    bigger = SimSettings(
        gpu_memory_gib=80.0, weights_gib=20.0, kv_bytes_per_token=1 << 16, mem_fraction_static=0.75
    )
    assert bigger.max_total_tokens == 40 * GIB // (1 << 16)
    # --max-total-tokens given caps the pool, as SGLang's flag does
    capped = SimSettings(
        gpu_memory_gib=80.0,
        weights_gib=20.0,
        mem_fraction_static=0.75,
        max_total_tokens=1000,
        given=("max_total_tokens",),
    )
    assert capped.max_total_tokens == 1000


def test_a_fraction_that_leaves_no_pool_or_no_slack_fails_the_start(tmp_path) -> None:
    too_small = SimSettings(gpu_memory_gib=80.0, weights_gib=40.0, mem_fraction_static=0.5)
    with pytest.raises(RuntimeError, match="Not enough memory"):
        serve_in_thread(too_small)
    no_slack = [
        "--gpu-memory-gib",
        "80",
        "--weights-gib",
        "20",
        "--mem-fraction-static",
        "0.95",
        "--activation-gib",
        "6",
        "--port",
        "0",
        "--startup-seconds",
        "0",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "deploytool.sim", *no_slack], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "CUDA out of memory" in done.stderr


def test_server_info_reports_the_resolved_launch() -> None:
    s = SimSettings(
        startup_seconds=0,
        cuda_graph_max_bs=16,
        gpu_memory_gib=80.0,
        weights_gib=20.0,
        kv_bytes_per_token=1 << 16,
        mem_fraction_static=0.5,
        spec_accept_rate=0.5,
        speculative_num_steps=2,
    )
    with serve_in_thread(s, wait_ready=True) as sim:
        info = httpx.get(sim.url + "/server_info", timeout=10).json()
    assert info["max_total_num_tokens"] == 327_680
    assert info["cuda_graph_max_bs_decode"] == 16
    assert info["speculative_num_steps"] == 2
    assert info["internal_states"][0]["avg_spec_accept_length"] == pytest.approx(1.75)
    assert info["internal_states"][0]["memory_usage"]["token_capacity"] == 327_680


def test_graphs_by_batch_size_and_the_chunk_fail_a_start_above_the_edge() -> None:
    """The runtime's rule is the planner's (edge_rule.py): each captured decode batch size's graph
    (SGLang's capture list up to --cuda-graph-max-bs) and the largest chunk's activations must fit
    beside the pool; the failure says what was needed and the highest fraction that starts."""
    from deploytool.sim.launch_rules import start_failure

    base = {
        "gpu_memory_gib": 100.0,
        "weights_gib": 10.0,
        "graph_mib_per_bs": 1.0,
        "chunk_mib_per_token": 0.25,
    }
    # capture list up to 8: 1 + 2 + 4 + 8 = 15 MiB of graphs; a 8192-token chunk: 2048 MiB
    # -> 2063 MiB beside the pool; 100 GiB x (1 - 0.979) = 2150 MiB holds it, 0.980 (2048 MiB) does not
    fits = SimSettings(**base, cuda_graph_max_bs=8, chunked_prefill_size=8192, mem_fraction_static=0.979)
    assert start_failure(fits) is None
    over = SimSettings(**base, cuda_graph_max_bs=8, chunked_prefill_size=8192, mem_fraction_static=0.98)
    failure = start_failure(over)
    assert (
        failure
        and "CUDA out of memory" in failure
        and "the highest mem-fraction-static that starts is 0.979" in failure
    )
    # more graph sizes: 512's capture list sums to far more, and the same fraction no longer starts
    graphs = SimSettings(**base, cuda_graph_max_bs=512, chunked_prefill_size=8192, mem_fraction_static=0.979)
    assert start_failure(graphs) is not None
    # a smaller chunk buys it back
    small = SimSettings(**base, cuda_graph_max_bs=8, chunked_prefill_size=2048, mem_fraction_static=0.99)
    assert start_failure(small) is None
