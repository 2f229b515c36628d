"""Where SGLang 0.5.23 really puts the figures deploytool reads, with fallbacks for servers that
put them elsewhere. Pure functions over the JSON the endpoints return; qualify and bench both
use them, so there is one answer to "what is this server's running-request limit".

  running limit   /server_info internal_states[i].effective_max_running_requests_per_dp, summed
                  over the DP ranks (managers/scheduler_components/internal_state.py). The
                  top-level max_running_requests is the CLI flag, null when not given
                  (utils/common.py build_server_info); it is only a fallback.
  context length  /v1/models data[0].max_model_len = model_config.context_len (http_server.py); the
                  top-level context_length is the flag, null when not given.
  model info      /model_info; /get_model_info is its deprecated name (http_server.py).
  weight version  /model_info weight_version (and metadata.weight_version of each response).
  memory          internal_states[i].memory_usage (scheduler_components/memory_usage.py).
  any other key   find_key: the top level first, then each internal_states entry.
"""

from __future__ import annotations

from typing import Any

# 0.5.23 names first; older servers (before the rename) answer only the second.
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
MODEL_INFO_PATHS = ("/model_info", "/get_model_info")

# CUDA-graph settings: 0.5.23 splits them by phase (arg_groups/field_order.py); the single
# keys are what older servers report.
CUDA_GRAPH_KEYS = (
    "cuda_graph_max_bs_decode",
    "cuda_graph_max_bs_prefill",
    "disable_decode_cuda_graph",
    "disable_prefill_cuda_graph",
    "cuda_graph_max_bs",
    "disable_cuda_graph",
)


def _states(info: Any) -> list[dict[str, Any]]:
    states = (info or {}).get("internal_states") if isinstance(info, dict) else None
    return [s for s in states or [] if isinstance(s, dict)]


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return int(value)


def running_limit(info: Any) -> tuple[int | None, str]:
    """(requests the server runs at once, where that came from)."""
    per_rank = [_int(s.get("effective_max_running_requests_per_dp")) for s in _states(info)]
    counts = [v for v in per_rank if v is not None]
    if counts and len(counts) == len(per_rank):
        dp = _int((info or {}).get("dp_size")) or 1
        # one internal_states entry per DP rank; a server that returns one entry for all ranks
        # still runs that many per rank
        total = sum(counts) if len(counts) > 1 else counts[0] * dp
        return total, "internal_states[].effective_max_running_requests_per_dp"
    # Fallback (servers without effective_max_running_requests_per_dp): the resolved flag.
    for where, value in (
        (
            "max_running_requests",
            (info or {}).get("max_running_requests") if isinstance(info, dict) else None,
        ),
        *(("internal_states[].max_running_requests", s.get("max_running_requests")) for s in _states(info)),
    ):
        if _int(value) is not None:
            return _int(value), where
    return None, "not reported"


def context_length(models: Any, info: Any, model_info: Any = None) -> tuple[int | None, str]:
    data = (models or {}).get("data") if isinstance(models, dict) else None
    card = data[0] if data and isinstance(data[0], dict) else {}
    if _int(card.get("max_model_len")) is not None:
        return _int(card["max_model_len"]), "/v1/models max_model_len"
    # Fallbacks: the flag as /server_info shows it (null on 0.5.23 unless given), older model info.
    if isinstance(info, dict) and _int(info.get("context_length")) is not None:
        return _int(info["context_length"]), "server info context_length"
    if isinstance(model_info, dict) and _int(model_info.get("context_length")) is not None:
        return _int(model_info["context_length"]), "model info context_length"
    return None, "not reported"


def weight_version(model_info: Any) -> str | None:
    value = model_info.get("weight_version") if isinstance(model_info, dict) else None
    return None if value is None else str(value)


def runtime_version(info: Any) -> str | None:
    """The serving runtime's release: /server_info's `version` (SGLang's __version__)."""
    value = info.get("version") if isinstance(info, dict) else None
    return value if isinstance(value, str) and value else None


def memory_usage(info: Any) -> list[dict[str, Any]]:
    """memory_usage of each DP rank (GB figures and token capacity), [] when not reported."""
    return [s["memory_usage"] for s in _states(info) if isinstance(s.get("memory_usage"), dict)]


def kv_pool_tokens(info: Any) -> int | None:
    """max_total_num_tokens: top level (scheduler init info), else memory_usage.token_capacity."""
    if isinstance(info, dict) and _int(info.get("max_total_num_tokens")) is not None:
        return _int(info["max_total_num_tokens"])
    for usage in memory_usage(info):
        if _int(usage.get("token_capacity")) is not None:
            return _int(usage["token_capacity"])
    for state in _states(info):
        if _int(state.get("max_total_num_tokens")) is not None:
            return _int(state["max_total_num_tokens"])
    return None


def find_key(info: Any, key: str) -> Any:
    """A value from SGLang's server info: top level first, then each `internal_states` entry
    (SGLang puts scheduler figures like avg_spec_accept_length there)."""
    if not isinstance(info, dict):
        return None
    if info.get(key) is not None:
        return info[key]
    for state in info.get("internal_states") or []:
        if isinstance(state, dict) and state.get(key) is not None:
            return state[key]
    return None
