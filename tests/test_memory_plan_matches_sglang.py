"""The planner against SGLang 0.5.23's own sizing code, run on CPU in the referee environment
(conftest's `sglang_referee_python`: the sglang parser venv plus sglang's serving packages, of
which the config classes need transformers), made by the fixture where it is not there yet.

What imports without a GPU and is compared here: configs/mamba_utils.py (Mamba2StateShape,
`mamba_cache_per_req`), configs/qwen3_next.py and configs/qwen3_5.py (`mamba2_cache_params`,
`full_attention_layer_ids`, `linear_layer_ids`), mem_cache/allocation_sizing.py
(`get_mamba_tracking_slots`). The package's configs/__init__.py pulls torchvision (not in the
venv), so the probe registers configs/ as a bare namespace; and the TP width, which SGLang reads
from its published runtime context, is handed to `linear_attn_tp_size` directly. The pool
budget itself needs a live GPU (it measures free memory), so it stays pinned to the hand-worked
examples in test_memory_plan_arithmetic.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from deploytool.memory import read_checkpoint
from deploytool.memory.plan import state_bytes_per_request

MODELS = Path(__file__).parent / "data" / "models"

PROBE = r"""
import json, os, sys, types
import sglang.srt as srt
base = list(srt.__path__)[0]
pkg = types.ModuleType("sglang.srt.configs"); pkg.__path__ = [os.path.join(base, "configs")]
sys.modules["sglang.srt.configs"] = pkg
import sglang.srt.configs.qwen3_next as qn
from sglang.srt.configs.qwen3_5 import Qwen3_5MoeTextConfig
from sglang.srt.mem_cache.allocation_sizing import get_mamba_tracking_slots
qn._is_cpu = False  # the CPU branch re-reads the runtime context for head padding
request = json.load(sys.stdin)
out = {"tracking_slots": get_mamba_tracking_slots(extra_buffer=True, overlap=True), "cases": []}
for case in request:
    os.environ["SGLANG_MAMBA_SSM_DTYPE"] = case["dtype"]
    qn.linear_attn_tp_size = lambda tp=case["tp"]: tp
    text = {k: v for k, v in case["text_config"].items() if k != "model_type"}
    config = Qwen3_5MoeTextConfig(**text)
    params = config.mamba2_cache_params
    out["cases"].append({"per_req": params.mamba_cache_per_req, "linear": list(params.layers),
                         "full": list(config.full_attention_layer_ids)})
print(json.dumps(out))
"""


def test_linear_attention_state_and_layer_split_match_sglangs_own_code(sglang_referee_python: Path) -> None:
    shape = read_checkpoint(MODELS / "qwen3.6-35b-a3b-fp8")
    text = json.loads((MODELS / "qwen3.6-35b-a3b-fp8" / "config.json").read_text())["text_config"]
    # a second, differently shaped hybrid: wider linear attention, another layer pattern
    other = dict(
        text,
        linear_num_value_heads=48,
        linear_num_key_heads=16,
        num_hidden_layers=8,
        layer_types=["linear_attention"] * 3
        + ["full_attention"]
        + ["linear_attention"] * 3
        + ["full_attention"],
    )
    cases = [(text, "float32", 1), (text, "bfloat16", 1), (text, "float32", 2), (other, "bfloat16", 4)]
    request = [{"text_config": t, "dtype": d, "tp": tp} for t, d, tp in cases]
    proc = subprocess.run(
        [str(sglang_referee_python), "-c", PROBE],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["tracking_slots"] == 2  # the planner's ratio 3 + 2 with the extra buffer
    from deploytool.memory.checkpoint import shape_from_config

    for (config_text, dtype, tp), sglang in zip(cases, answer["cases"], strict=False):
        ours = (
            shape
            if config_text is text
            else shape_from_config({"architectures": ["X"], "text_config": config_text})
        )
        assert ours.full_attention_layer_ids == sglang["full"]
        assert ours.linear_attention_layer_ids == sglang["linear"]
        assert state_bytes_per_request(ours, ssm_dtype=dtype, tp_size=tp) == sglang["per_req"], (dtype, tp)
