"""After start, preflight records the memory plan's prediction beside what the server reports
(internal_states[].memory_usage, max_total_num_tokens, max_running_requests) and the error."""

from __future__ import annotations

from pathlib import Path

from deploytool.checks.targets import Target
from deploytool.memory import PlanInputs, card_from_table, plan_memory, read_checkpoint
from deploytool.memory.accuracy import compare_with_server, reported_memory
from deploytool.profiles import load_profile
from deploytool.qualify import run_qualification
from deploytool.sim import SimSettings, serve_in_thread

MODELS = Path(__file__).parent / "data" / "models"

# The shape SGLang 0.5.23 serves (managers/scheduler_components/memory_usage.py build_memory_usage,
# internal_state.py _add_memory_usage), with figures of an H200 start.
SGLANG_INFO = {
    "max_total_num_tokens": 2_300_000,
    "max_running_requests": 64,
    "internal_states": [
        {
            "avg_spec_accept_length": 3.1,
            "memory_usage": {
                "weight": 36.1,
                "kvcache": 48.2,
                "startup_available": 139.4,
                "token_capacity": 2_300_000,
                "token_capacity_swa": None,
                "graph": {"decode": 1.5, "prefill": 0.25},
            },
            "effective_max_running_requests_per_dp": 64,
        }
    ],
}


def test_reported_memory_reads_sglangs_memory_usage() -> None:
    reported = reported_memory(SGLANG_INFO)
    assert reported == {
        "weights_gib": 36.1,
        "kv_pool_gib": 48.2,
        "pool_tokens": 2_300_000,
        "max_running_requests": 64,
        "graph_gib": 1.75,
        "startup_available_gib": 139.4,
    }
    bare = reported_memory({"max_total_num_tokens": 1000, "internal_states": [{}]})
    assert bare["pool_tokens"] == 1000 and bare["weights_gib"] is None


def test_the_error_is_prediction_over_report() -> None:
    plan = plan_memory(
        read_checkpoint(MODELS / "qwen3.6-35b-a3b-fp8"),
        card_from_table("h200"),
        PlanInputs(
            context_length=262_144,
            mem_fraction_static=0.9,
            max_running_requests=64,
            speculative_algorithm="NEXTN",
            speculative_num_draft_tokens=4,
        ),
    )
    record = compare_with_server(plan, SGLANG_INFO)
    assert record["predicted"]["pool_tokens"] == plan.pool_tokens
    assert record["error_pct"]["pool_tokens"] == round(100 * (plan.pool_tokens - 2_300_000) / 2_300_000, 2)
    # memory_usage.weight is the target's weights alone: the draft's layer and private embedding
    # and head (resident when the pool is sized) are planned apart and not compared with it
    assert plan.draft_weights_gib > 0
    assert record["error_pct"]["weights_gib"] == round(100 * (plan.weights_gib - 36.1) / 36.1, 2)
    assert record["error_pct"]["max_running_requests"] == 0.0


def test_preflight_records_the_plan_beside_the_servers_figures(tmp_path: Path) -> None:
    handle = serve_in_thread(
        SimSettings(startup_seconds=0, log_requests=False, max_total_tokens=500_000), wait_ready=True
    )
    try:
        profile = load_profile("sim").model_copy(deep=True)
        profile.server.port = handle.settings.port
        profile.model.host_path = str(MODELS / "qwen3-30b-a3b")
        profile.match.gpu_name = ["NVIDIA H200"]
        profile.server.args["mem-fraction-static"] = 0.85
        # the sim's 262,144-token context is past the 40,960 the config derives: SGLang's override
        profile.server.env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] = "1"
        report = run_qualification(
            Target(url=handle.url, profile=profile),
            suites=["preflight"],
            report_dir=tmp_path / "report",
            overrides={"preflight": {"ready_timeout_s": 2}},
        )
    finally:
        handle.stop()
    record = report.suite("preflight").figures["memory_plan"]
    assert record["card"] == "NVIDIA H200" and record["verdict"] == "fits"
    assert record["reported"]["pool_tokens"] == 500_000
    predicted = record["predicted"]["pool_tokens"]
    assert record["error_pct"]["pool_tokens"] == round(100 * (predicted - 500_000) / 500_000, 2)
    # the simulator holds no weights: its memory_usage (SGLang 0.5.23's shape) says 0 GB,
    # and a zero is no measurement to put an error against
    assert record["reported"]["weights_gib"] == 0.0
    assert "weights_gib" not in record["error_pct"]


def test_preflight_without_a_checkpoint_records_nothing(tmp_path: Path) -> None:
    handle = serve_in_thread(SimSettings(startup_seconds=0, log_requests=False), wait_ready=True)
    try:
        report = run_qualification(
            Target(url=handle.url, profile=None),
            suites=["preflight"],
            report_dir=tmp_path / "report",
            overrides={"preflight": {"ready_timeout_s": 2}},
        )
    finally:
        handle.stop()
    assert report.suite("preflight").figures["memory_plan"] is None
