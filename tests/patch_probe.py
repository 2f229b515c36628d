"""Run by tests/test_memory_patches_on_cpu.py in deploytool's sglang parser venv (a CPU torch,
sglang's light imports): the functions the patches change, loaded from an unpacked sglang tree
(argv[1], patched or not) and run on a CPU. 0002-0004: each function's own module needs a GPU
stack to import, so only its definition is executed; the globals it uses are given here (the
behaviour under test) or stand in as MagicMocks. 0001, last: sglang.srt.utils.common as
imported, asked on a machine described afterwards (NVML standing in for an SM120 card, torch.cuda
refusing to be asked). Prints one JSON object. One process answers every patch: importing torch
and sglang is most of its cost."""

import __future__

import ast
import builtins
import json
import os
import sys
import types
import weakref
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

import torch

TREE = sys.argv[1]


def load(rel, names, given):
    """Execute the top-level definitions `names` of TREE/rel in a namespace of `given`, every
    other global name they use standing in as a MagicMock (their imports are not run)."""
    path = os.path.join(TREE, rel)
    tree = ast.parse(Path(path).read_text(), path)
    nodes = [n for n in tree.body if getattr(n, "name", None) in names]
    assert sorted(n.name for n in nodes) == sorted(names), (rel, [n.name for n in nodes])
    module = ast.Module(body=nodes, type_ignores=[])
    used = {n.id for n in ast.walk(module) if isinstance(n, ast.Name)} - set(dir(builtins))
    namespace = {name: mock.MagicMock(name=name) for name in used}
    namespace.update(given, __name__="probe_" + rel.replace("/", "_"))
    # annotations stay strings: their names are types this probe does not need
    exec(
        compile(module, path, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True),
        namespace,
    )
    return namespace


out = {}

# -- 0003: the MTP draft's quantization ------------------------------------------------------
from sglang.srt.environ import envs  # noqa: E402  (imported once the probe's stand-ins are in place)

built = []


class Fp8Config:  # stands in for layers/quantization/fp8.py (its imports need a GPU stack)
    def __init__(self, **kwargs):
        built.append(kwargs)
        self.kwargs = kwargs

    def get_name(self):
        return "fp8"


class QuantConfig:
    def __init__(self, name, serialized=True, quantized_layers=()):
        self.name, self.is_checkpoint_nvfp4_serialized, self.quantized_layers = (
            name,
            serialized,
            list(quantized_layers),
        )

    def get_name(self):
        return self.name


fp8_module = mock.MagicMock(Fp8Config=Fp8Config)
sys.modules["sglang.srt.layers.quantization.fp8"] = fp8_module
mtp = load(
    "sglang/srt/models/qwen3_5_mtp.py",
    [
        n
        for n in ("_mtp_quant_config", "_checkpoint_mtp_quant_config")
        if "def " + n + "(" in Path(TREE, "sglang/srt/models/qwen3_5_mtp.py").read_text()
    ],
    {
        "envs": envs,
        "is_npu": lambda: False,
        "Qwen3_5ForCausalLM": mock.MagicMock(
            packed_modules_mapping={"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
        ),
    },
)
checkpoints = {
    "nvfp4 (MTP in bf16)": QuantConfig("modelopt_fp4"),
    "mixed (MTP in bf16)": QuantConfig("modelopt_mixed", quantized_layers=["model.layers.0.mlp"]),
    "mixed (MTP quantized)": QuantConfig("modelopt_mixed", quantized_layers=["mtp.layers.0.mlp"]),
    "unquantized": None,
}
for flag in ("0", "1"):
    os.environ["SGLANG_MTP_FP8_AT_LOAD"] = flag
    for label, config in checkpoints.items():
        built.clear()
        chosen = mtp["_mtp_quant_config"](config)
        out[f"mtp {label} flag={flag}"] = (
            None
            if chosen is None
            else "checkpoint"
            if chosen is config
            else {
                "fp8": chosen.kwargs.get("is_checkpoint_fp8_serialized"),
                "activation": chosen.kwargs.get("activation_scheme"),
            }
        )
os.environ.pop("SGLANG_MTP_FP8_AT_LOAD")

# -- 0004: where the tokenizer process preprocesses images ----------------------------------
platform = mock.MagicMock(device_type="cuda")
platform.is_cuda_alike.return_value = True
proc_ns = load(
    "sglang/srt/multimodal/processors/base_processor.py",
    ["BaseMultimodalProcessor"],
    {
        "envs": envs,
        "_is_cpu": False,
        "_is_xpu": False,
        "_is_npu": False,
        "platforms": mock.MagicMock(current_platform=platform),
        "get_exec": lambda: mock.MagicMock(**{"deterministic.rl_on_policy_target": None}),
        "ABC": object,
        "abstractmethod": lambda f: f,
        "contextmanager": lambda f: f,
    },
)
device_of = proc_ns["BaseMultimodalProcessor"]._fast_image_processor_device
fake = mock.MagicMock(server_args=mock.MagicMock(base_gpu_id=3))
for flag in ("0", "1"):
    os.environ["SGLANG_FORCE_CPU_IMAGE_PREPROCESSING"] = flag
    out[f"image device flag={flag}"] = device_of(fake, mock.MagicMock())
os.environ.pop("SGLANG_FORCE_CPU_IMAGE_PREPROCESSING")

# -- 0002: when the draft takes the target's embedding and head ------------------------------
events = []
VOCAB, HIDDEN = 1024, 64


class DraftModel(torch.nn.Module):
    """The parts of an MTP draft that matter here: its own embedding and head at load."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Parameter(torch.zeros(VOCAB, HIDDEN))
        self.head = torch.nn.Parameter(torch.zeros(VOCAB, HIDDEN))
        self.hot_token_id = None
        self.private = [weakref.ref(self.embed), weakref.ref(self.head)]

    def set_embed_and_head(self, embed, head):  # as models/qwen3_5_mtp.py does
        del self.embed, self.head
        self.embed, self.head = embed, head
        events.append("set_embed_and_head")


class Runner:
    def __init__(self, model):
        self.model = model
        self.model_config = mock.MagicMock(
            hf_config=mock.MagicMock(index_share_for_mtp_iteration=False, index_topk=None)
        )


class FakeTpModelWorker:
    def __init__(self, **kwargs):
        self.model_runner = Runner(DraftModel())
        events.append("draft loaded")

    def alloc_memory_pool(self, **kwargs):
        events.append("pool sized")


class Base:
    def __init__(self):
        pass

    def _rebuild_topk1_chain_buffers(self):
        pass


target_embed = torch.nn.Parameter(torch.ones(VOCAB, HIDDEN))
target_head = torch.nn.Parameter(torch.ones(VOCAB, HIDDEN))
spec = mock.MagicMock(
    speculative_eagle_topk=1,
    speculative_num_steps=3,
    speculative_num_draft_tokens=4,
    speculative_algorithm="NEXTN",
    speculative_use_rejection_sampling=False,
    speculative_token_map=None,
)
algorithm = mock.MagicMock()
algorithm.is_eagle3.return_value = False
worker_ns = load(
    "sglang/srt/speculative/eagle_worker_v2.py",
    ["EagleDraftWorker"],
    {
        "EagleDraftWorkerBase": Base,
        "TpModelWorker": FakeTpModelWorker,
        "get_spec": lambda: spec,
        "SpeculativeAlgorithm": mock.MagicMock(from_string=lambda s: algorithm),
        "get_plan_stream": lambda device: (None, nullcontext()),
        "resolve_draft_embed_and_head": lambda **kw: (target_embed, target_head),
        "torch": torch,
        "logger": mock.MagicMock(),
    },
)
sys.modules["sglang.srt.lora.layers"] = mock.MagicMock(unwrap_lora_layer=lambda layer: layer)
target = mock.MagicMock()
target.model_runner.model = mock.MagicMock(lm_head=None)
worker = worker_ns["EagleDraftWorker"](
    server_args=mock.MagicMock(), gpu_id=0, nccl_port=0, target_worker=target
)
draft = worker.draft_runner.model
out["draft after __init__"] = {
    "shares target": draft.embed is target_embed and draft.head is target_head,
    "private copies alive": sum(ref() is not None for ref in draft.private),
}
worker.alloc_memory_pool(memory_pool_config=None, req_to_token_pool=None, token_to_kv_pool_allocator=None)
out["draft after alloc_memory_pool"] = {
    "shares target": draft.embed is target_embed and draft.head is target_head,
    "private copies alive": sum(ref() is not None for ref in draft.private),
}
out["order"] = events

# -- 0001: the device capability from NVML ----------------------------------------------------
# Last, as it changes torch.cuda and pynvml for the rest of the process. The module was imported
# on the CPU as it is (with sglang, above); the machine below is described afterwards: one SM120
# GPU that NVML can see, where creating a CUDA context is an error.
from sglang.srt.utils import common  # noqa: E402  (last, as the comment above says)

calls = []
nvml = types.ModuleType("pynvml")
nvml.nvmlInit = lambda: calls.append("init")
nvml.nvmlShutdown = lambda: calls.append("shutdown")
nvml.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
nvml.nvmlDeviceGetCudaComputeCapability = lambda h: (12, 0)
sys.modules["pynvml"] = nvml
torch.cuda.is_available = lambda: True
torch.cuda.is_initialized = lambda: False
torch.cuda._get_nvml_device_index = lambda i: i
torch.version.cuda = "13.0"


def no_context(*a, **k):
    raise RuntimeError("torch.cuda.get_device_capability: would create a CUDA context")


torch.cuda.get_device_capability = no_context
for cached in (common.is_cuda, common.is_sm120):
    cached.cache_clear()
capability = out["0001"] = {"file": common.__file__}
for name, call in (
    ("capability", lambda: common.get_device_capability(0)),
    ("is_sm120", common.is_sm120),
    ("device_sm", common.get_device_sm),
):
    try:
        value = call()
        capability[name] = list(value) if isinstance(value, tuple) else value
    except RuntimeError as exc:
        capability[name] = "error: " + str(exc)
capability["nvml_calls"] = calls.count("init")
print(json.dumps(out))
