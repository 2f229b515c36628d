"""What SGLang does with a launch at start-up, said before the start: the launches it refuses
(with its own message, the flag or file behind it and what to change) and the values it
quietly replaces (asked, what it will use, why, which flag gives what was asked).

Each rule is SGLang's own, read in 0.5.17 and 0.5.23 (paths under sglang/srt/; the two
releases agree on every rule here). Where SGLang's own code can run on a CPU (the model
config, the server-argument checks) the flag probe runs it (image/in_image/flagprobe.py) and
tests/test_startup_rules.py holds these mirrors to it; the rules that need the card (its
compute capability) or the pool (the running limit) are the planner's, and the refusal table
measured on a real H200 (docs/measured/h200-refusals.md) holds them to a real server.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .checkpoint import ModelShape

# environ.py EnvBool.parse: what SGLang's `envs.X.get()` takes as true
ENV_TRUE = ("true", "1", "yes", "y")
# the running limit SGLang sets for speculative decoding when the launch gives none
# (arg_groups/speculative_hook.py, every EAGLE-family, NGRAM and DFLASH handler)
SPEC_DEFAULT_RUNNING = 48
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
# server_args.py `_handle_kv4_compatibility`: the MHA backends that can serve an FP4 KV cache
KV4_MHA_BACKENDS = ("triton", "torch_native", "flex_attention", "trtllm_mha")


@dataclass
class StartupNote:
    """One thing SGLang does at start-up with this launch."""

    kind: str  # "refuse": SGLang will not start; "change": it starts with another value
    flag: str  # the flag (or file) behind it
    asked: Any
    uses: Any  # what SGLang will use (None for a refusal)
    why: str
    fix: str  # what to change (a refusal) or which flag gives what was asked (a change)
    sglang_says: str  # SGLang's own message, as its log prints it
    where: str  # SGLang's source of the rule

    def line(self) -> str:
        if self.kind == "refuse":
            return f"SGLang refuses {self.flag} {self.asked}: {self.why}. {self.fix}"
        return f"{self.flag}: asked {self.asked}, SGLang will use {self.uses} ({self.why}); {self.fix}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def env_true(env: dict[str, Any], name: str) -> bool:
    """SGLang's EnvBool: true, 1, yes, y (any case)."""
    return str(env.get(name, "")).strip().lower() in ENV_TRUE


# The launch flags these rules read (each `_flag(args, NAME)` below; a test keeps the two equal):
# a what-if on one of them can change what the plan says even where the pools stay the same.
FLAGS_READ = frozenset(
    {
        "attention-backend",
        "context-length",
        "cuda-graph-max-bs",
        "cuda-graph-max-bs-decode",
        "decode-attention-backend",
        "disable-cuda-graph",
        "enable-mixed-chunk",
        "kv-cache-dtype",
        "max-running-requests",
        "prefill-attention-backend",
        "speculative-algorithm",
        "speculative-eagle-topk",
        "speculative-num-draft-tokens",
        "speculative-num-steps",
    }
)


def _flag(args: dict[str, Any], name: str) -> Any:
    value = args.get(name)
    return None if value is False else value


def _int(value: Any) -> int | None:
    return None if value is None or value is True else int(value)


def _spec(args: dict[str, Any]) -> str | None:
    algo = _flag(args, "speculative-algorithm")
    return str(algo).upper() if algo and str(algo).upper() != "NONE" else None


def context_notes(
    args: dict[str, Any], env: dict[str, Any], shape: ModelShape, profile_context: int | None = None
) -> list[StartupNote]:
    """configs/model_config.py `_derive_context_length`, run while SGLang builds its model config."""
    asked = _int(_flag(args, "context-length"))
    derived, key = (
        shape.derived_context_length,
        shape.derived_context_key or "none of the context keys (2048)",
    )
    where = "configs/model_config.py ModelConfig._derive_context_length"
    if asked is None and profile_context and profile_context != derived:
        return [
            StartupNote(
                "change",
                "--context-length",
                None,
                derived,
                f"derived from config.json ({key}); the profile's model.context_length says "
                f"{profile_context:,}",
                f"set --context-length {profile_context} to serve that",
                "",
                where,
            )
        ]
    if asked is None or asked <= derived:
        return []
    warning = (
        f"Warning: User-specified context_length ({asked}) is greater than the derived context_length "
        f"({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the derived "
        "context_length may differ from max_position_embeddings in the model's config."
    )
    if env_true(env, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"):
        return [
            StartupNote(
                "change",
                "--context-length",
                asked,
                asked,
                f"longer than the {derived:,} config.json derives ({key}); allowed by "
                "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN, with SGLang's warning",
                "the model may answer wrongly past its trained length",
                warning,
                where,
            )
        ]
    return [
        StartupNote(
            "refuse",
            "--context-length",
            asked,
            None,
            f"config.json allows {derived:,} tokens ({key}, {shape.source})",
            f"set context-length to {derived} or less, or set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
            "in server.env to run past the trained length",
            "ValueError: " + warning + " To allow overriding this maximum, set the env var "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
            where,
        )
    ]


def kv_dtype_notes(args: dict[str, Any], compute_capability: str | None) -> list[StartupNote]:
    """server_args.py `_handle_mxfp8_kv_cache_compatibility` and `_handle_kv4_compatibility`
    (0.5.23: arg_groups/kv_cache_hook.py): the card's architecture and the attention backend."""
    dtype = _flag(args, "kv-cache-dtype")
    if dtype not in ("mxfp8", "nvfp4", "fp4_mx_block16"):
        return []
    notes: list[StartupNote] = []
    major = int(compute_capability.split(".")[0]) if compute_capability else None
    sm = compute_capability.replace(".", "") if compute_capability else None
    where = "server_args.py _handle_mxfp8_kv_cache_compatibility / _handle_kv4_compatibility"
    if dtype == "mxfp8" and major is not None and major < 10:
        notes.append(
            StartupNote(
                "refuse",
                "--kv-cache-dtype",
                dtype,
                None,
                f"the card is sm{sm}, the FA4 MXFP8 attention path needs SM100+ (Blackwell)",
                "use fp8_e4m3 (or bf16) on this card",
                "ValueError: --kv-cache-dtype mxfp8 requires an SM100+ (Blackwell) "
                "GPU for the block-scaled operands used by the FA4 MXFP8 attention path.",
                where,
            )
        )
    if dtype == "nvfp4" and major is not None and major not in (10, 12):
        notes.append(
            StartupNote(
                "refuse",
                "--kv-cache-dtype",
                dtype,
                None,
                f"the card is sm{sm}, NVFP4 KV needs Blackwell SM100 or SM120",
                "use fp4_mx_block16 (the block-size-16 FP4 recipe) or fp8_e4m3",
                "RuntimeError: --kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120. Use "
                "--kv-cache-dtype=fp4_mx_block16 for the block-size-16 FP4 recipe.",
                where,
            )
        )
    backend = _flag(args, "attention-backend")
    prefill, decode = _flag(args, "prefill-attention-backend"), _flag(args, "decode-attention-backend")
    if (
        not notes
        and backend
        and not prefill
        and not decode
        and backend != "fa4"
        and backend not in KV4_MHA_BACKENDS
        and dtype in ("nvfp4", "fp4_mx_block16")
    ):
        notes.append(
            StartupNote(
                "refuse",
                "--attention-backend",
                backend,
                None,
                f"an FP4 KV cache ({dtype}) is served only by "
                + ", ".join(KV4_MHA_BACKENDS)
                + " (or fa4 for prefill)",
                f"use --attention-backend triton, or another kv-cache-dtype with {backend}",
                f"AssertionError: KV4 MHA expects attention_backend to be one of {list(KV4_MHA_BACKENDS)}, "
                f"but got {backend}",
                where,
            )
        )
    return notes


def speculative_notes(args: dict[str, Any]) -> list[StartupNote]:
    """arg_groups/speculative_hook.py `_handle_eagle_family`: the settings it rewrites."""
    algo = _spec(args)
    if algo is None or algo not in EAGLE_FAMILY:
        return []
    where = "arg_groups/speculative_hook.py _handle_eagle_family"
    notes: list[StartupNote] = []
    steps = _int(_flag(args, "speculative-num-steps"))
    topk = _int(_flag(args, "speculative-eagle-topk"))
    draft = _int(_flag(args, "speculative-num-draft-tokens"))
    if steps is None and topk is None and draft is None:
        steps, topk, draft = 3, 1, 4  # _auto_choose_speculative_params for every model deploytool serves
        notes.append(
            StartupNote(
                "change",
                "--speculative-num-steps",
                None,
                "3 steps, top-k 1, 4 draft tokens",
                "chosen by SGLang when the launch names none",
                "set all three to choose",
                "",
                where + " _auto_choose_speculative_params",
            )
        )
    if topk == 1 and draft is not None and steps is not None and draft != steps + 1:
        notes.append(
            StartupNote(
                "change",
                "--speculative-num-draft-tokens",
                draft,
                steps + 1,
                "with top-k 1 the draft is a chain: one token per step, plus the verified one",
                f"more draft tokens need more steps (--speculative-num-steps {draft - 1}) or top-k > 1",
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1",
                where,
            )
        )
    if _flag(args, "enable-mixed-chunk"):
        notes.append(
            StartupNote(
                "change",
                "--enable-mixed-chunk",
                True,
                False,
                "mixed chunked prefill does not run with EAGLE-family speculative decoding",
                "none: drop the flag, or turn speculative decoding off to mix prefill into decode",
                "Mixed chunked prefill is disabled because of using eagle speculative decoding.",
                where,
            )
        )
    if _flag(args, "max-running-requests") is None:
        notes.append(
            StartupNote(
                "change",
                "--max-running-requests",
                None,
                SPEC_DEFAULT_RUNNING,
                "SGLang's default for speculative decoding",
                "set --max-running-requests to choose",
                "Max running requests is reset to 48 for speculative decoding. "
                "You can override this by explicitly setting --max-running-requests.",
                where,
            )
        )
    return notes


def running_notes(args: dict[str, Any], plan: Any) -> list[StartupNote]:
    """mem_cache/kv_cache_configurator.py `resolve_max_num_reqs` (the planner's running limit),
    and the decode CUDA graphs it bounds (model_executor/runner/base_cuda_graph_runner.py
    `get_batch_sizes_to_capture`: batch sizes above the running limit are not captured)."""
    if plan is None:
        return []
    where = "mem_cache/kv_cache_configurator.py resolve_max_num_reqs"
    asked = _int(_flag(args, "max-running-requests"))
    running = plan.max_running_requests
    notes: list[StartupNote] = []
    if plan.pool_tokens <= 0:
        # the budget is pre_model_load x fraction - the weights; SGLang's own minimum comes from
        # what is free when it sizes the pool (a little under what the planner knows)
        weights = plan.weights_gib + plan.draft_weights_gib
        minimum = weights / plan.pre_model_load_gib if plan.pre_model_load_gib else 1.0
        # a fraction is of the card's memory: above 1 it is no advice, the card is too small
        fix = (
            f"raise mem-fraction-static above about {minimum:.4f} "
            "(`deploytool plan-memory --set mem-fraction-static=...` tries one)"
            if minimum < 1
            else "no mem-fraction-static can make room (the weights alone are more than the card has): "
            "a card with more memory, or more cards (tp-size), is needed"
        )
        return [
            StartupNote(
                "refuse",
                "--mem-fraction-static",
                plan.mem_fraction_static,
                None,
                f"the weights ({weights:.2f} GiB) take more than the fraction keeps of {plan.pre_model_load_gib:.2f} GiB: "
                "nothing is left for the KV pool",
                fix,
                "ValueError: Loaded weights leave no GPU memory for the KV cache under "
                f"--mem-fraction-static={plan.mem_fraction_static}. Raise --mem-fraction-static above ...",
                "mem_cache/kv_cache_configurator.py _profile_available_bytes",
            )
        ]
    if asked is not None and running < asked:
        slots, ratio = plan.state_slots, plan.state_slots_per_request
        if slots is not None and ratio and slots // ratio == running and running < plan.pool_tokens // 2:
            notes.append(
                StartupNote(
                    "change",
                    "--max-running-requests",
                    asked,
                    running,
                    f"the linear-attention state cache holds {slots} slots, {ratio} per request",
                    "raise --max-mamba-cache-size or --mamba-full-memory-ratio, or halve the state with "
                    "--mamba-ssm-dtype bfloat16",
                    f"max_running_requests is capped to {running} by the mamba state cache (max_mamba_cache_size={slots}, "
                    f"{ratio} state slots per request). To raise it: increase --mamba-full-memory-ratio or "
                    "--max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16.",
                    where,
                )
            )
        else:
            notes.append(
                StartupNote(
                    "change",
                    "--max-running-requests",
                    asked,
                    running,
                    f"the KV pool holds {plan.pool_tokens:,} tokens and SGLang allows at most half as many requests",
                    "a larger pool (mem-fraction-static, max-total-tokens, kv-cache-dtype) raises it",
                    f"max_running_requests={running}",
                    where,
                )
            )
    # 0.5.17's flag; 0.5.23 names the decode graphs' own
    graphs = _int(_flag(args, "cuda-graph-max-bs") or _flag(args, "cuda-graph-max-bs-decode"))
    if graphs is not None and graphs > running > 0 and not _flag(args, "disable-cuda-graph"):
        notes.append(
            StartupNote(
                "change",
                "--cuda-graph-max-bs" if _flag(args, "cuda-graph-max-bs") else "--cuda-graph-max-bs-decode",
                graphs,
                running,
                f"decode CUDA graphs are captured only up to the running limit ({running})",
                "raise the running limit to capture larger batches",
                f"bs=[... {running}]",
                "model_executor/runner/base_cuda_graph_runner.py get_batch_sizes_to_capture",
            )
        )
    return notes


def startup_notes(
    args: dict[str, Any],
    env: dict[str, Any],
    shape: ModelShape | None,
    *,
    compute_capability: str | None = None,
    plan: Any = None,
    profile_context: int | None = None,
) -> list[StartupNote]:
    """Every rule above for one launch (`args`: server.args with --set applied, SGLang's names)."""
    args = {str(k).lstrip("-"): v for k, v in args.items()}
    notes = context_notes(args, env, shape, profile_context) if shape is not None else []
    notes += kv_dtype_notes(args, compute_capability)
    notes += speculative_notes(args)
    notes += running_notes(args, plan)
    return notes


def refusals(notes: list[StartupNote]) -> list[StartupNote]:
    return [n for n in notes if n.kind == "refuse"]
