"""The planner and deploytool's patch series: the series declares each patch's memory effects
(images/sglang/patches/<version>/memory.yaml), the planner applies those a launch turns on, and
the arithmetic of each is pinned to a hand-worked example:

- 0002 (the draft shares the target's embedding and head before the pool is sized): the draft
  no longer holds vocab x hidden x 2 bytes x 2 (untied) when the pool is sized;
- 0003 (FP8 MTP draft at load, with SGLANG_MTP_FP8_AT_LOAD=1): the MTP layer at one byte per
  weight, `fc` and the router staying bf16 (layers/quantization/fp8.py online FP8);
- ReplaySSM (`--enable-linear-replayssm-spec`, a 0.5.23 flag): no per-draft-token state, a
  replay window per running request instead (configs/mamba_utils.py
  `replayssm_ring_bytes_per_req`, kv_cache_configurator.py `_handle_max_mamba_cache`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from deploytool.errors import ProfileError
from deploytool.image import patches
from deploytool.image.in_image.unidiff import read_series
from deploytool.memory import PlanInputs, card_from_table, plan_memory, read_checkpoint
from deploytool.memory.checkpoint import shape_from_config
from deploytool.memory.linear_state import replayssm_window_bytes
from deploytool.memory.patch_effects import EFFECTS, read_memory_effects
from deploytool.memory.weights import draft_layers_fp8_bytes
from deploytool.profiles import ProfileStore

MODELS = Path(__file__).parent / "data" / "models"
SERIES = patches.series_dir("0.5.23")
MIB = 1 << 20
# one Qwen3.6-35B-A3B MTP layer: q with its output gate, k, v, o; 256 experts, the shared expert
# and the router; fc joining 2 x hidden
MTP_PARAMS = (
    (16 * 256 * 2 + 2 * 2 * 256 + 16 * 256) * 2048 + (256 * 3 * 512 + 3 * 512 + 256) * 2048 + 2 * 2048 * 2048
)
VOCAB_BYTES = 248_320 * 2048 * 2 * 2  # the draft's own bf16 embedding and head


def test_every_patch_of_the_series_declares_its_memory_effects() -> None:
    names = read_series(SERIES / "series")
    declared = read_memory_effects(SERIES, names)
    assert [d.patch for d in declared] == names
    by_name = {d.patch: d for d in declared}
    assert by_name["0002-draft-shares-embed-and-head-before-pool.patch"].effects == (
        "draft_shares_target_vocab",
    )
    fp8 = by_name["0003-mtp-draft-fp8-at-load.patch"]
    assert fp8.effects == ("draft_layers_fp8",) and fp8.when == {
        "env": "SGLANG_MTP_FP8_AT_LOAD",
        "equals": "1",
    }
    assert fp8.active({}, {"SGLANG_MTP_FP8_AT_LOAD": "1"}) and not fp8.active({}, {})
    # the two that only move the tokenizer process off the GPU leave the pools alone, and say why
    for name in ("0001-nvml-device-capability.patch", "0004-image-preprocessing-on-cpu.patch"):
        assert by_name[name].effects == () and "CUDA context" in by_name[name].why
    assert set(yaml.safe_load((SERIES / "memory.yaml").read_text())["patches"]) == set(names)


@pytest.mark.parametrize(
    "entry, message",
    [
        (None, "its memory effects are not declared"),
        ({"effects": ["frees_everything"], "why": "x"}, "unknown effect(s) frees_everything"),
        ({"effects": [], "why": ""}, "`why` is empty"),
        (
            {"effects": ["draft_layers_fp8"], "why": "x", "when": {"env": "A", "arg": "b"}},
            "names one `env` or one `arg`",
        ),
    ],
)
def test_a_series_whose_memory_effects_are_not_declared_properly_is_refused(
    tmp_path: Path, entry, message
) -> None:
    data = {"patches": {} if entry is None else {"0001-a.patch": entry}}
    (tmp_path / "memory.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_memory_effects(tmp_path, ["0001-a.patch"])


def test_an_error_in_memory_yaml_names_the_file_and_the_line(tmp_path: Path) -> None:
    (tmp_path / "memory.yaml").write_text(
        "patches:\n  0001-a.patch:\n    why: x\n    effects: [frees_everything]\n"
    )
    with pytest.raises(ProfileError) as bad:
        read_memory_effects(tmp_path, ["0001-a.patch"])
    assert bad.value.message.startswith(f"{tmp_path / 'memory.yaml'}:4: patch 0001-a.patch: unknown effect")
    (tmp_path / "memory.yaml").write_text("patches:\n  0001-a.patch: {effects: [}\n")
    with pytest.raises(ProfileError, match=r"memory.yaml:2:\d+: malformed YAML"):
        read_memory_effects(tmp_path, ["0001-a.patch"])


def test_a_series_without_memory_yaml_is_refused_and_an_empty_one_needs_none(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"memory.yaml: missing"):
        read_memory_effects(tmp_path, ["0001-a.patch"])
    assert read_memory_effects(tmp_path, []) == []


def test_an_arg_condition_follows_the_launch_flag() -> None:
    from deploytool.memory.patch_effects import PatchMemory

    patch = PatchMemory("p", ("draft_layers_fp8",), "why", {"arg": "some-flag", "equals": "on"})
    assert patch.active({"some-flag": "on"}, {}) and not patch.active({"some-flag": "off"}, {})
    assert patch.condition() == " (with --some-flag=on)"
    assert set(EFFECTS) == {"draft_shares_target_vocab", "draft_layers_fp8"}


def test_the_draft_sharing_patch_reaches_only_the_draft_worker_it_changes() -> None:
    """0002 changes EagleDraftWorker.__init__: a multi-layer EAGLE launch has another draft worker
    (MultiLayerEagleDraftWorker) and a STANDALONE draft is a separate model that never shares."""
    share = {d.patch: d for d in read_memory_effects(SERIES, read_series(SERIES / "series"))}[
        "0002-draft-shares-embed-and-head-before-pool.patch"
    ]
    assert share.active({"speculative-algorithm": "NEXTN"}, {})
    assert share.active({"speculative-algorithm": "EAGLE", "enable-multi-layer-eagle": False}, {})
    assert not share.active({"speculative-algorithm": "EAGLE", "enable-multi-layer-eagle": True}, {})
    assert not share.active({"speculative-algorithm": "standalone"}, {})
    assert "not with --enable-multi-layer-eagle or --speculative-algorithm=STANDALONE" in share.condition()
    profile = ProfileStore().get("rtx5090-qwen3.6-35b-a3b-nvfp4")
    from deploytool.memory.profile_plan import plan_for_profile

    shape, card = read_checkpoint(MODELS / "qwen3.6-35b-a3b-nvfp4"), card_from_table("rtx5090")
    patched = plan_for_profile(profile, card, shape=shape)
    multi = plan_for_profile(profile, card, shape=shape, overrides={"enable-multi-layer-eagle": True})
    assert multi.draft_weights_gib - patched.draft_weights_gib == pytest.approx(VOCAB_BYTES / 2**30, abs=0.01)
    assert any("0002" in p and "not turned on by this launch" in p for p in multi.patches)


def test_environment_switches_are_read_as_sglang_reads_them() -> None:
    """0003 reads SGLANG_MTP_FP8_AT_LOAD through SGLang's EnvBool: true, 1, yes, y in any case."""
    fp8 = {d.patch: d for d in read_memory_effects(SERIES, read_series(SERIES / "series"))}[
        "0003-mtp-draft-fp8-at-load.patch"
    ]
    for on in ("1", "true", "True", "yes", "Y"):
        assert fp8.active({}, {"SGLANG_MTP_FP8_AT_LOAD": on}), on
    for off in ("0", "false", "no", "", "2"):
        assert not fp8.active({}, {"SGLANG_MTP_FP8_AT_LOAD": off}), off


def _inputs(**kw) -> PlanInputs:
    base = {
        "context_length": 262_144,
        "mem_fraction_static": 0.88,
        "kv_cache_dtype": "fp8_e4m3",
        "max_running_requests": 8,
        "speculative_algorithm": "NEXTN",
        "speculative_num_draft_tokens": 4,
        "mamba_ssm_dtype": "bfloat16",
        "max_mamba_cache_size": 40,
        "min_running_requests": 8,
    }
    return PlanInputs(**{**base, **kw})


def test_draft_sharing_gives_the_pool_the_drafts_private_vocabulary() -> None:
    """With the state slots pinned every byte the draft frees goes to the KV pool: 2 x 248,320
    x 2048 x 2 bytes over 10,240 bytes per token (fp8, ten layers: a Qwen3.6 config keeps the
    draft's KV out of the cell)."""
    shape = read_checkpoint(MODELS / "qwen3.6-35b-a3b-nvfp4")
    card = card_from_table("rtx5090")
    stock = plan_memory(shape, card, _inputs())
    shared = plan_memory(shape, card, _inputs(patch_effects=frozenset({"draft_shares_target_vocab"})))
    assert stock.weights_gib == shared.weights_gib  # the target's, what memory_usage.weight reports
    assert (stock.draft_weights_gib - shared.draft_weights_gib) * 2**30 == pytest.approx(
        VOCAB_BYTES, abs=0.01 * 2**30
    )
    assert shared.draft_weights_gib == round(MTP_PARAMS * 2 / 2**30, 2)  # the bf16 MTP layer alone
    assert shared.kv_bytes_per_token_with_draft == 10_240
    assert abs(shared.pool_tokens - stock.pool_tokens - VOCAB_BYTES / 10_240) <= 1
    assert shared.state_slots == stock.state_slots == 40


def test_an_fp8_draft_keeps_fc_and_the_router_in_bf16() -> None:
    shape = read_checkpoint(MODELS / "qwen3.6-35b-a3b-nvfp4")
    assert shape.draft_precision == "bf16" and shape.draft_layer_bytes() == MTP_PARAMS * 2
    bf16_part = 2 * 2048 * 2048 + 256 * 2048
    assert draft_layers_fp8_bytes(shape) == (MTP_PARAMS - bf16_part) + bf16_part * 2
    card = card_from_table("rtx5090")
    both = frozenset({"draft_shares_target_vocab", "draft_layers_fp8"})
    plan = plan_memory(shape, card, _inputs(patch_effects=both))
    assert plan.draft_weights_gib == round(draft_layers_fp8_bytes(shape) / 2**30, 2)
    # an MTP already quantized in the checkpoint (the FP8 release) is left as it is
    fp8 = read_checkpoint(MODELS / "qwen3.6-35b-a3b-fp8")
    plain = plan_memory(fp8, card_from_table("h200"), _inputs(mem_fraction_static=0.9))
    same = plan_memory(
        fp8,
        card_from_table("h200"),
        _inputs(mem_fraction_static=0.9, patch_effects=frozenset({"draft_layers_fp8"})),
    )
    assert plain.draft_weights_gib == same.draft_weights_gib


def test_replayssm_replaces_the_per_draft_token_state_by_a_window_per_request() -> None:
    """Qwen3.6 Gated DeltaNet, bf16 conv dtype, window 16: per layer d (32 x 16 x 128 x 2) +
    normalized k (16 x 16 x 128 x 2) + fp32 gate (32 x 16 x 4) + the low parts of d and k;
    30 layers; charged for max-running-requests + 1."""
    shape = read_checkpoint(MODELS / "qwen3.6-35b-a3b-nvfp4")
    per_layer = 32 * 16 * 128 * 2 + 16 * 16 * 128 * 2 + 32 * 16 * 4 + 32 * 16 * 128 * 2 + 16 * 16 * 128 * 2
    assert replayssm_window_bytes(shape, record_len=16, tp_size=1) == per_layer * 30 == 11_857_920
    card = card_from_table("rtx5090")
    recurrent = plan_memory(shape, card, _inputs())
    replay = plan_memory(shape, card, _inputs(enable_linear_replayssm_spec=True))
    per_req = 32_931_840  # bf16 state per request (test_memory_plan_arithmetic.py)
    assert recurrent.spec_state_gib == round(
        per_req * (8 + 1) * 4 / 2**30, 2
    )  # min(8, 40 // 5) + 1, 4 draft tokens
    assert replay.spec_state_gib == round(11_857_920 * 9 / 2**30, 2)
    assert replay.pool_tokens > recurrent.pool_tokens
    # auto-sized slots: the whole state budget goes to slots, less the fixed window
    auto = plan_memory(shape, card, _inputs(enable_linear_replayssm_spec=True, max_mamba_cache_size=None))
    pre = (
        32_607 - 616 - 621
    ) * MIB  # pre_model_load_memory; stream, DeepGEMM, expert map: 122 MiB more go before the weights load
    rope = 262_144 * 64 * 4  # the rotary cos/sin table, fp32
    rest = (
        pre
        - 122 * MIB
        - (23_500_000_000 - MTP_PARAMS * 2 + rope)
        - (MTP_PARAMS * 2 + VOCAB_BYTES)
        - pre * 0.12
        - 100 * MIB
    )
    assert auto.state_slots == int((rest * 0.9 / 1.9 - 11_857_920 * 9 - per_req) // per_req)


def test_a_config_only_folder_is_planned_from_its_shape_as_dummy_weights() -> None:
    """The GPU harness's 35B-A3B-shaped folder (config.json only, --load-format dummy): the
    weights are the parameters SGLang allocates, at bf16, counted by hand here."""
    config = json.loads((MODELS / "qwen3.6-35b-a3b-fp8" / "config.json").read_text())["text_config"]
    config = {k: v for k, v in config.items() if k not in ("quantization_config",)}
    config.update(architectures=["Qwen3_5MoeForCausalLM"], tie_word_embeddings=False)
    shape = shape_from_config(config)
    shape.weight_bytes, shape.weight_source = shape.estimated_weight_bytes(), "config"
    h = 2048
    attention = (16 * 256 * 2 + 2 * 2 * 256 + 16 * 256) * h
    gdn = (2 * 2048 + 2 * 4096) * h + 2 * 32 * h + 8192 * 4 + 4096 * h
    moe = 256 * 3 * h * 512 + 3 * h * 512 + 256 * h
    target = (10 * attention + 30 * gdn + 40 * moe) * 2 + 2 * 248_320 * h * 2
    assert shape.weight_bytes == target + MTP_PARAMS * 2
    plan = plan_memory(
        shape, card_from_table("h200"), _inputs(mem_fraction_static=0.55, kv_cache_dtype="bfloat16")
    )
    # + the rotary table SGLang builds with the model: 262,144 positions x 64 x fp32
    assert plan.weights_gib == round((target + 262_144 * 64 * 4) / 2**30, 2)
    assert any("estimated from config.json" in a for a in plan.assumptions)


def test_no_patches_is_said_with_none_and_only_alone(tmp_path: Path) -> None:
    store = ProfileStore()
    stock = store.get("rtx5090-qwen3.6-35b-a3b-nvfp4-stock")
    assert stock.image.patches == ["none"] and patches.series_for(stock).names == []
    mixed = stock.model_copy(
        update={
            "image": stock.image.model_copy(update={"patches": ["none", "0001-nvml-device-capability.patch"]})
        }
    )
    with pytest.raises(ProfileError, match="names `none` beside patches"):
        patches.series_for(mixed)
    whole = store.get("rtx5090-qwen3.6-35b-a3b-nvfp4")
    assert patches.series_for(whole).names == read_series(SERIES / "series")
