"""SGLang's start-up rules as deploytool says them before the start (deploytool.memory.startup):
`up` refuses a launch SGLang would refuse before anything stops, announces what SGLang changes,
and the context length SGLang derives is SGLang's own function's answer (run on CPU in the
referee environment, the function read from the installed sglang's source: its module imports
torchvision through sglang.srt.configs, which a CPU environment lacks)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from deploy_facts import facts_with_memory

from deploytool.deploy.plan import UpOptions, plan_up
from deploytool.host.slots import Slot
from deploytool.memory.cards import card_from_table
from deploytool.memory.checkpoint import derived_context_length, read_checkpoint
from deploytool.memory.gate import MemoryRefused
from deploytool.memory.startup import env_true, startup_notes
from deploytool.profiles import load_profile

MODELS = Path(__file__).parent / "data" / "models"

CPU = Slot()


def _profile(**args):
    profile = load_profile("sim").model_copy(deep=True)
    profile.model.host_path = str(MODELS / "qwen3-30b-a3b")
    profile.match.gpu_name = ["NVIDIA H200"]
    profile.server.args.update({"mem-fraction-static": 0.85, **args})
    return profile


def test_up_refuses_a_context_past_the_config_before_any_step_with_sglangs_message() -> None:
    profile = _profile()  # the sim's 262,144 tokens on a config that derives 40,960
    with pytest.raises(MemoryRefused) as refused:
        plan_up(facts_with_memory(profile), profile, UpOptions(skip_qualify=True))
    message = refused.value.message
    assert "nothing was stopped" in message and "--context-length 262144" in message
    assert (
        "User-specified context_length (262144) is greater than the derived context_length (40960)" in message
    )
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" in message
    # SGLang's own override (any of EnvBool's spellings) turns the refusal into an announced change
    for spelling in ("1", "true", "YES", "y"):
        profile.server.env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] = spelling
        plan = plan_up(facts_with_memory(profile), profile, UpOptions(skip_qualify=True))
        assert plan.memory is not None and plan.memory["verdict"] == "fits"
    profile.server.env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] = "0"
    with pytest.raises(MemoryRefused):
        plan_up(facts_with_memory(profile), profile, UpOptions(skip_qualify=True))


def test_up_refuses_a_kv_dtype_the_card_cannot_serve_even_where_the_planner_has_no_figure() -> None:
    profile = _profile(**{"context-length": 40960, "kv-cache-dtype": "nvfp4"})
    with pytest.raises(MemoryRefused, match="requires Blackwell SM100 or SM120"):
        plan_up(facts_with_memory(profile), profile, UpOptions(skip_qualify=True))
    # the same launch on a Blackwell card is no refusal of SGLang's (the planner then has no FP4 figure)
    notes = startup_notes(
        {"kv-cache-dtype": "nvfp4", "attention-backend": "triton"},
        {},
        None,
        compute_capability=card_from_table("b300").compute_capability,
    )
    assert not notes


def test_up_says_what_sglang_will_change_and_plans_with_it() -> None:
    profile = _profile(
        **{
            "context-length": 40960,
            "speculative-algorithm": "EAGLE",
            "speculative-num-steps": 3,
            "speculative-eagle-topk": 1,
            "speculative-num-draft-tokens": 6,
            "enable-mixed-chunk": True,
        }
    )
    profile.server.args.pop("max-running-requests", None)
    plan = plan_up(facts_with_memory(profile), profile, UpOptions(skip_qualify=True))
    said = "\n".join(plan.warnings)
    assert "--speculative-num-draft-tokens: asked 6, will use 4" in said
    assert "--enable-mixed-chunk: asked True, will use False" in said
    assert "--max-running-requests: asked None, will use 48" in said
    # the profile's gate reads what SGLang will use: 48 running requests, not SGLang's estimate
    assert plan.memory["max_running_requests"] == 48


def test_sglangs_truthiness_for_its_switches() -> None:
    assert [env_true({"X": v}, "X") for v in ("1", "true", "True", "yes", "Y", " y ")] == [True] * 6
    assert [env_true({"X": v}, "X") for v in ("0", "false", "no", "", "2", "on")] == [False] * 6
    assert env_true({}, "X") is False


# SGLang's function, read from the installed file and run on its own: its module imports
# sglang.srt.configs, which imports torchvision (not in a CPU environment)
REFEREE = r"""
import ast, json, os, sys
import importlib.util
spec = importlib.util.find_spec("sglang")
path = os.path.join(os.path.dirname(spec.origin), "srt", "utils", "hf_transformers", "common.py")
tree = ast.parse(open(path).read())
keep = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name == "get_context_length")
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "CONTEXT_LENGTH_KEYS" for t in n.targets))]
scope = {}
exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), scope)
from transformers import AutoConfig
out = []
for folder in json.load(sys.stdin):
    config = AutoConfig.from_pretrained(folder)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    out.append(scope["get_context_length"](text))
print(json.dumps(out))
"""


def test_the_derived_context_is_sglangs_own_functions_answer(
    sglang_referee_python: Path, tmp_path: Path
) -> None:
    real = Path(__file__).parent / "data" / "sglang-real" / "models"
    folders = [
        MODELS / "qwen3-30b-a3b",
        MODELS / "qwen3.6-35b-a3b-fp8",
        real / "qwen3-tiny",
        real / "qwen36-tiny",
    ]
    base = json.loads((MODELS / "qwen3-30b-a3b" / "config.json").read_text())
    variants = {  # the rules of the function: rope scaling's factor, its exceptions, the key order
        "yarn": {
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
        },
        "linear": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
        "seq-length-first": {"seq_length": 8192},
    }
    for name, change in variants.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**base, **change}))
        folders.append(folder)
    proc = subprocess.run(
        [str(sglang_referee_python), "-c", REFEREE],
        input=json.dumps([str(f) for f in folders]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sglang = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = [
        read_checkpoint(f).derived_context_length
        if (f / "model.safetensors.index.json").exists()
        else derived_context_length(_text(json.loads((f / "config.json").read_text())))[0]
        for f in folders
    ]
    assert ours == sglang
    assert sglang[0] == 40960 and sglang[-1] == 8192  # the cases differ, so the comparison can fail


def _text(config: dict) -> dict:
    return config.get("text_config") if isinstance(config.get("text_config"), dict) else config


@pytest.mark.usefixtures("sglang_parser_python")
def test_profiles_check_with_a_checkpoint_runs_sglangs_start_up_checks(tmp_path: Path) -> None:
    from conftest import run_cli

    real = Path(__file__).parent / "data" / "sglang-real" / "models" / "qwen3-tiny"
    (tmp_path / "t-ctx.yaml").write_text(f"""\
name: t-ctx
extends: sglang-base
image: {{runtime_version: "0.5.23"}}
match: {{gpu_name: [NVIDIA H200]}}
model: {{host_path: {real}, served_name: tiny, context_length: 65536}}
server:
  args: {{context-length: 65536, mem-fraction-static: 0.5, speculative-algorithm: EAGLE, speculative-num-steps: 3,
          speculative-eagle-topk: 1, speculative-num-draft-tokens: 6}}
""")
    proc = run_cli(
        "profiles",
        "check",
        "--profile",
        "t-ctx",
        "--profiles-dir",
        str(tmp_path),
        "--no-image",
        "--checkpoint",
        str(real),
        "--json",
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    answer = json.loads(proc.stdout)
    own = answer["startup"]
    # SGLang's own model configuration where it imports (an image), else said why not (a CPU venv
    # without torchvision); the planner's rules either way
    assert "greater than the derived context_length (32768)" in (
        own["refused"] or ""
    ) or "does not import here" in (own["note"] or ""), own
    rules = {(n["kind"], n["flag"]): n for n in answer["startup_rules"]}
    assert "User-specified context_length (65536)" in rules[("refuse", "--context-length")]["sglang_says"]
    assert rules[("change", "--speculative-num-draft-tokens")]["uses"] == 4
    # within the limit, the same launch passes
    fixed = (tmp_path / "t-ctx.yaml").read_text().replace("65536", "32768")
    (tmp_path / "t-ctx.yaml").write_text(fixed)
    proc = run_cli(
        "profiles",
        "check",
        "--profile",
        "t-ctx",
        "--profiles-dir",
        str(tmp_path),
        "--no-image",
        "--checkpoint",
        str(real),
        "--json",
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_plan_memory_prints_the_refusal_and_the_changes() -> None:
    from conftest import run_cli

    harness = Path(__file__).resolve().parents[1] / "scripts" / "gpu-check" / "profiles"
    hybrid = Path(__file__).parent / "data" / "sglang-real" / "models" / "qwen36-tiny"
    base = [
        "plan-memory",
        "--profile",
        "gpu-check-qwen36-tiny-mtp",
        "--profiles-dir",
        str(harness),
        "--card",
        "h200",
        "--checkpoint",
        str(hybrid),
        "--set",
        "mamba-radix-cache-strategy=no_buffer",
    ]
    changed = run_cli(
        *base,
        "--set",
        "max-running-requests=24",
        "--set",
        "max-mamba-cache-size=30",
        "--set",
        "speculative-num-draft-tokens=6",
    )
    said = changed.stdout.replace("\n", " ")
    assert "SGLang will change: --max-running-requests: asked 24, will use 10" in " ".join(said.split())
    assert "--speculative-num-draft-tokens: asked 6, will use 4" in said
    refused = run_cli(*base, "--set", "context-length=524288", "--json")
    assert refused.returncode == 1
    plan = json.loads(refused.stdout)
    assert plan["verdict"] == "error" and plan["startup"][0]["kind"] == "refuse"
    assert any("derived context_length (262144)" in p for p in plan["problems"])
