"""The patches' changed functions, run on a CPU from the pinned sglang wheel before and after
the series (tests/patch_probe.py, one process per tree in deploytool's sglang parser venv):

- 0001 `get_device_capability()`: on a machine with an SM120 card that NVML sees and torch.cuda
  refusing to be asked, the unpatched module asks torch.cuda, the patched one answers from NVML;
- 0002 `EagleDraftWorker.__init__`: the draft gives up its own embedding and head for the
  target's before the scheduler sizes the pool (stock: after), and its private tensors are gone;
- 0003 `_mtp_quant_config`: with SGLANG_MTP_FP8_AT_LOAD=1 a BF16 MTP module gets SGLang's online
  FP8 config; a checkpoint that quantizes its MTP keeps its own; without the flag nothing changes;
- 0004 `BaseMultimodalProcessor._fast_image_processor_device`: with
  SGLANG_FORCE_CPU_IMAGE_PREPROCESSING=1 the tokenizer process preprocesses on the CPU.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from deploytool.image import patches
from deploytool.profiles import ProfileStore

CARD = "rtx5090-qwen3.6-35b-a3b-nvfp4"
SGLANG = "0.5.23"
PROBE = Path(__file__).parent / "patch_probe.py"


@pytest.fixture(scope="module")
def probed(module_home, tmp_path_factory, sglang_parser_python: Path) -> dict[str, dict]:
    python = sglang_parser_python
    pyver = subprocess.run(
        [str(python), "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    profile = ProfileStore().get(CARD)
    profile = profile.model_copy(update={"image": profile.image.model_copy(update={"python": pyver})})
    root = tmp_path_factory.mktemp("trees")
    trees = {
        "stock": patches.link_tree(
            patches.unpacked_sources(patches.sglang_wheel(SGLANG, pyver)), root / "stock"
        ),
        "patched": patches.patched_tree(profile, root / "patched"),
    }
    out = {"trees": {name: str(tree) for name, tree in trees.items()}}
    for name, tree in trees.items():
        proc = subprocess.run(
            [str(python), str(PROBE), str(tree)],
            capture_output=True,
            text=True,
            timeout=300,
            env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
            cwd=root,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.index
def test_patched_sglang_answers_compute_capability_from_nvml(probed) -> None:
    before, after = probed["stock"]["0001"], probed["patched"]["0001"]
    assert before["file"].startswith(probed["trees"]["stock"]) and after["file"].startswith(
        probed["trees"]["patched"]
    )
    # Unpatched: get_device_capability() and is_sm120() go to torch.cuda (a CUDA context).
    assert before["capability"].startswith("error:") and before["is_sm120"].startswith("error:")
    # Patched: NVML answers, torch.cuda is never asked.
    assert after["capability"] == [12, 0]
    assert after["is_sm120"] is True
    assert after["device_sm"] == 120 and before["device_sm"] == 120  # get_device_sm had NVML already
    assert after["nvml_calls"] >= 2


@pytest.mark.index
def test_the_draft_shares_the_targets_vocabulary_before_the_pool_is_sized(probed) -> None:
    stock, patched = probed["stock"], probed["patched"]
    # stock: the pool is sized while the draft still holds its own embedding and head
    assert stock["order"] == ["draft loaded", "pool sized", "set_embed_and_head"]
    assert stock["draft after __init__"] == {"shares target": False, "private copies alive": 2}
    # patched: shared (and the private tensors freed) before the pool is sized, and only once
    assert patched["order"] == ["draft loaded", "set_embed_and_head", "pool sized"]
    assert patched["draft after __init__"] == {"shares target": True, "private copies alive": 0}
    assert (
        patched["draft after alloc_memory_pool"]
        == stock["draft after alloc_memory_pool"]
        == {"shares target": True, "private copies alive": 0}
    )


@pytest.mark.index
def test_a_bf16_mtp_draft_is_quantized_to_fp8_at_load_only_behind_its_flag(probed) -> None:
    stock, patched = probed["stock"], probed["patched"]
    online_fp8 = {"fp8": False, "activation": "dynamic"}  # Fp8Config: not serialized, dynamic activations
    for checkpoint in ("nvfp4 (MTP in bf16)", "mixed (MTP in bf16)", "unquantized"):
        assert stock[f"mtp {checkpoint} flag=0"] is None and stock[f"mtp {checkpoint} flag=1"] is None
        assert patched[f"mtp {checkpoint} flag=0"] is None, checkpoint
        assert patched[f"mtp {checkpoint} flag=1"] == online_fp8, checkpoint
    # a checkpoint that quantizes its MTP keeps its own config, flag or not
    for tree in (stock, patched):
        assert (
            tree["mtp mixed (MTP quantized) flag=0"]
            == tree["mtp mixed (MTP quantized) flag=1"]
            == "checkpoint"
        )


@pytest.mark.index
def test_images_are_preprocessed_on_the_cpu_behind_the_existing_flag(probed) -> None:
    stock, patched = probed["stock"], probed["patched"]
    assert stock["image device flag=0"] == stock["image device flag=1"] == "cuda:3"  # stock ignores it here
    assert patched["image device flag=0"] == "cuda:3"
    assert patched["image device flag=1"] == "cpu"


@pytest.mark.index
def test_the_h200_port_of_the_draft_sharing_patch_applies_to_sglang_0_5_17(tmp_path: Path) -> None:
    """The measurement on the lent H200 ran sglang 0.5.17 (its torch); the port is the same
    change to 0.5.17's EagleDraftWorker."""
    from deploytool.image.in_image import unidiff

    folder = patches.series_dir("0.5.17")
    names = unidiff.read_series(folder / "series")
    assert names == ["0002-draft-shares-embed-and-head-before-pool.patch"]
    tree = patches.link_tree(
        patches.unpacked_sources(patches.sglang_wheel("0.5.17", "3.12")), tmp_path / "site"
    )
    [result] = unidiff.apply_series(tree, folder, names)
    assert result.applied and result.files == ["sglang/srt/speculative/eagle_worker_v2.py"]
    text = (tree / result.files[0]).read_text()
    init = text.index("class EagleDraftWorker")
    shared, sized = (
        text.index("self._embed_and_head_shared = True", init),
        text.index("def alloc_memory_pool", init),
    )
    assert shared < sized  # shared in __init__, before the scheduler calls alloc_memory_pool
    from deploytool.memory.patch_effects import read_memory_effects

    assert read_memory_effects(folder, names)[0].effects == ("draft_shares_target_vocab",)
