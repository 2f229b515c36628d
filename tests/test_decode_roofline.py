"""The roofline beside bench's decode figures: bandwidth from NVML's bus width x memory clock
x 2, bytes per decode step from the checkpoint, the ceiling and the measured share."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploytool.bench import build_method, run_bench
from deploytool.bench.roofline import roofline_lines
from deploytool.checks.targets import Target
from deploytool.host.gpus import GpuInfo
from deploytool.memory import card_from_gpu, card_from_table, read_checkpoint, shape_from_config
from deploytool.memory.roofline import decode_roofline, weight_split, with_measurements
from deploytool.profiles import ProfileStore
from deploytool.sim import SimSettings, serve_in_thread

MODELS = Path(__file__).parent / "data" / "models"


def _gpu(**kw) -> GpuInfo:
    base = {
        "index": 0,
        "uuid": "GPU-1",
        "name": "NVIDIA H200",
        "compute_capability": "9.0",
        "memory_total_mib": 143771,
        "memory_free_mib": 143155,
        "power_limit_w": 700.0,
        "pcie_link_gen": 5,
        "pcie_link_gen_max": 5,
        "pcie_link_width": 16,
        "pcie_link_width_max": 16,
        "memory_bus_width_bits": 6016,
        "max_memory_clock_mhz": 3201,
    }
    base.update(kw)
    return GpuInfo(**base)


def test_bandwidth_is_bus_width_times_memory_clock_times_two() -> None:
    card = card_from_gpu(_gpu())
    assert card.bandwidth_bytes_per_s == 6016 / 8 * 3201e6 * 2 == pytest.approx(4.814e12, rel=1e-3)
    assert card.bandwidth_source == "NVML: 6016 bit / 8 x 3201 MHz x 2 = 4.81 TB/s"
    assert card_from_gpu(_gpu(memory_bus_width_bits=None)).bandwidth_bytes_per_s is None
    # the RTX 5090's GDDR7: 512 bits at 14001 MHz as NVML reports it = 1.79 TB/s
    assert card_from_table("rtx5090").bandwidth_bytes_per_s == pytest.approx(1.792e12, rel=1e-3)


def test_dense_model_reads_every_weight_but_the_embedding_each_step() -> None:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "vocab_size": 128_256,
    }
    shape = shape_from_config(config)
    shape.weight_bytes = 16_060_000_000  # an 8B model in bf16
    card = card_from_gpu(_gpu())
    roof = decode_roofline(shape, card, concurrencies=[1, 4], context_tokens=1000)
    embed = 128_256 * 4096 * 2
    kv = 8 * 256 * 32 * 2  # heads x (k + v) x layers x bf16 = 131,072 B a token
    step1 = 16_060_000_000 - embed + kv * 1000
    assert roof.points[0].bytes_per_step == step1
    assert roof.points[0].ceiling_tps_per_request == pytest.approx(card.bandwidth_bytes_per_s / step1)
    assert roof.points[1].bytes_per_step == 16_060_000_000 - embed + 4 * kv * 1000


def test_moe_reads_only_the_experts_a_step_touches() -> None:
    shape = read_checkpoint(MODELS / "qwen3.6-35b-a3b-fp8")
    split = weight_split(shape)
    per_expert = 3 * 2048 * 512 * 1.0  # gate, up, down in fp8
    one_token = split.active_bytes(1)
    # one token: top-8 of 256 experts in each of 40 layers
    assert split.active_bytes(1) - split.active_bytes(0) == 0  # at least one token is always read
    assert one_token == pytest.approx(
        split.total_bytes - split.not_read_bytes - per_expert * 256 * 40 + per_expert * 8 * 40
    )
    # many tokens: about every expert
    assert split.active_bytes(10_000) == pytest.approx(split.total_bytes - split.not_read_bytes, rel=1e-6)
    assert split.active_bytes(1) < split.active_bytes(4) < split.active_bytes(64)


def test_speculative_accept_length_multiplies_the_ceiling_and_the_share_is_measured_over_it() -> None:
    shape = read_checkpoint(MODELS / "qwen3.6-35b-a3b-nvfp4")
    card = card_from_table("rtx5090")
    plain = decode_roofline(shape, card, concurrencies=[1], context_tokens=628, mamba_ssm_dtype="bfloat16")
    spec = decode_roofline(
        shape,
        card,
        concurrencies=[1],
        context_tokens=628,
        mamba_ssm_dtype="bfloat16",
        accept_length=3.2,
        draft_tokens=6,
    )
    # the verify step touches the experts of 6 tokens, and keeps 3.2 tokens on average
    assert spec.points[0].bytes_per_step > plain.points[0].bytes_per_step
    assert spec.points[0].ceiling_tps_per_request == pytest.approx(
        card.bandwidth_bytes_per_s / spec.points[0].bytes_per_step * 3.2
    )
    with_measurements(spec, {1: 528.0})
    assert spec.points[0].share == pytest.approx(528.0 / spec.points[0].ceiling_tps_per_request, abs=1e-4)
    text = "\n".join(roofline_lines(spec.as_dict()))
    assert "measured 528.0" in text and "accept length 3.20" in text and "1.79 TB/s" in text


def test_bench_carries_the_roofline_when_the_profile_checkpoint_is_readable(tmp_path: Path) -> None:
    """A real bench run against the reference runtime, its profile pointing at a checkpoint config
    and naming a card: the run's decode figure is put against that card's ceiling."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "sim-roofline.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "sim-roofline",
                "extends": "sim",
                "match": {"gpu_name": ["NVIDIA H200"]},
                "model": {"host_path": str(MODELS / "qwen3.6-35b-a3b-fp8")},
            }
        )
    )
    profile = ProfileStore([folder]).get("sim-roofline")
    handle = serve_in_thread(
        SimSettings(startup_seconds=0, decode_tps=300, log_requests=False), wait_ready=True
    )
    try:
        method = build_method(
            quick=True,
            warmup_requests=1,
            warmup_output_tokens=8,
            decode_requests=2,
            decode_output_tokens=40,
            decode_prompt_tokens=64,
            load_concurrency=[2],
            load_requests_per_slot=1,
            load_output_tokens=20,
            prefill_prompt_tokens=[2000],
            prefill_prompts_each=1,
            run_timeout_s=60,
            request_timeout_s=20,
        )
        run = run_bench(
            Target(url=handle.url, profile=profile),
            method=method,
            report_dir=tmp_path / "report",
            progress=False,
        )
    finally:
        handle.stop()
    roof = run.roofline
    assert roof is not None and roof["card"] == "NVIDIA H200"
    point = roof["points"][0]
    assert point["concurrency"] == 1 and point["context_tokens"] == 64 + 20
    # repeated passes: the decode figure is the median over passes (each pass has a decode_c1 group)
    assert point["measured_tps_per_request"] == run.figure("decode_c1_tps").value
    assert len(run.figure("decode_c1_tps").repeat_values) == run.method["repeats"]
    assert point["share"] == pytest.approx(
        point["measured_tps_per_request"] / point["ceiling_tps_per_request"], abs=1e-4
    )
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Roofline" in report and "assumed: bandwidth data-sheet table" in report


def test_nvml_bus_width_and_memory_clock_are_read_into_the_inventory() -> None:
    from fake_nvml import FakeNvml

    from deploytool.host.gpus import read_inventory

    class WithMemoryBus(FakeNvml):
        NVML_CLOCK_MEM = 2

        def nvmlDeviceGetMemoryBusWidth(self, h):
            return 6016

        def nvmlDeviceGetMaxClockInfo(self, h, clock):
            return 3201 if clock == self.NVML_CLOCK_MEM else 1980

    gpu = read_inventory(WithMemoryBus()).gpus[0]
    assert (gpu.memory_bus_width_bits, gpu.max_memory_clock_mhz) == (6016, 3201)
    assert card_from_gpu(gpu).bandwidth_bytes_per_s == pytest.approx(4.814e12, rel=1e-3)
    # a driver that reports neither: None, not an error
    assert read_inventory(FakeNvml()).gpus[0].memory_bus_width_bits is None
