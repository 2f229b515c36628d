"""What the simulated server says about itself, in SGLang 0.5.23's shapes.

/server_info (sglang/srt/entrypoints/http_server.py `server_info`, utils/common.py
`build_server_info`): the resolved server arguments, flat, where a flag that was not given
keeps its ServerArgs default (null for max_running_requests and context_length), plus the
scheduler's init info (max_total_num_tokens, max_req_input_len), then `internal_states`, one
entry per DP rank (managers/scheduler_components/internal_state.py): the resolved arguments
again plus `effective_max_running_requests_per_dp`, `memory_usage`
(scheduler_components/memory_usage.py) and, only with speculative decoding,
`avg_spec_accept_length`. /model_info (http_server.py `model_info`) carries weight_version,
the parsers and the architectures. The sim adds `simulator: true` and its settings so a report
can never mistake it for a model.
"""

from __future__ import annotations

from typing import Any

from deploytool.sim.engine import Engine
from deploytool.sim.settings import SimSettings

# memory_usage.graph always has these phases (model_executor/graph_memory_usage.py)
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")


def resolved_args(s: SimSettings) -> dict[str, Any]:
    return {
        "model_path": s.model_path,
        "tokenizer_path": s.model_path,
        "served_model_name": s.served_model_name,
        "host": s.host,
        "port": s.port,
        "context_length": s.reported("context_length"),
        "max_running_requests": s.reported("max_running_requests"),
        "max_total_tokens": None,
        "chunked_prefill_size": s.chunked_prefill_size,
        "page_size": 1,
        "tp_size": s.tp_size,
        "dp_size": s.dp_size,
        "mem_fraction_static": s.mem_fraction_static,  # a profile's memory plan is compared with it
        "cuda_graph_max_bs_decode": s.cuda_graph_max_bs,
        "cuda_graph_max_bs_prefill": None,
        "disable_decode_cuda_graph": s.disable_cuda_graph,
        "disable_prefill_cuda_graph": s.disable_cuda_graph,
        "speculative_algorithm": s.reported_speculative_algorithm,
        "speculative_num_steps": s.reported_speculative_num_steps,
        "speculative_num_draft_tokens": s.speculative_num_draft_tokens,
        # --no-reasoning-field stands for a server without a working reasoning parser
        "reasoning_parser": None if s.no_reasoning_field else s.reasoning_parser,
        "tool_call_parser": s.tool_call_parser if s.tools else None,
        "enable_cache_report": s.enable_cache_report,
        "enable_metrics": s.enable_metrics,
        "default_chat_template_kwargs": s.chat_template_defaults or None,
        "weight_version": s.weight_version,
    }


def memory_usage(s: SimSettings) -> dict[str, Any]:
    # A simulator holds no weights: the figures are zeros except the token capacity it schedules by.
    return {
        "weight": 0.0,
        "kvcache": 0.0,
        "startup_available": 0.0,
        "token_capacity": s.max_total_tokens,
        "token_capacity_swa": None,
        "graph": dict.fromkeys(GRAPH_PHASES, 0.0),
    }


def server_info(s: SimSettings, engine: Engine, version: str, startup_time: float) -> dict[str, Any]:
    args = resolved_args(s)
    states = []
    for _rank in range(s.dp_size):
        state = {
            **args,
            "world_size": s.tp_size * s.dp_size,
            "startup_time": startup_time,
            "effective_max_running_requests_per_dp": s.max_running_requests,
            "last_gen_throughput": engine.stats.gen_throughput(),
            "memory_usage": memory_usage(s),
        }
        if s.speculative_enabled:  # _add_speculative returns early without a speculative algorithm
            state["avg_spec_accept_length"] = s.spec_accept_length
        states.append(state)
    return {
        **args,
        "launch_command": "python -m deploytool.sim",
        "status": "ready",
        "max_total_num_tokens": s.max_total_tokens,
        "max_req_input_len": min(s.context_length, s.max_total_tokens) - 1,
        "startup_time": startup_time,
        "internal_states": states,
        "version": version,
        "frontend": "python",
        "simulator": True,
        "sim_settings": s.as_dict(),
    }


def model_info(s: SimSettings) -> dict[str, Any]:
    return {
        "model_path": s.model_path,
        "served_model_name": s.served_model_name,
        "tokenizer_path": s.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": s.weight_version,
        "load_format": "dummy",
        "reasoning_parser": None if s.no_reasoning_field else s.reasoning_parser,
        "tool_call_parser": s.tool_call_parser if s.tools else None,
        "disaggregation_mode": "null",
        "has_image_understanding": s.vision,
        "has_audio_understanding": False,
        "model_type": "simulator",
        "architectures": ["DeploytoolSimulator"],
    }
