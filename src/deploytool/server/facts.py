"""What the server says about itself: /v1/models, /server_info (or /get_server_info),
/model_info (or /get_model_info) and /metrics. Every endpoint is optional; a server that lacks one is benchmarked
all the same, and the run records what it could not read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import serverfields
from .client import EndpointClient
from ..release.secrets import redact


@dataclass
class ServerFacts:
    model_id: str | None = None
    context_length: int | None = None
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    gpus: int | None = None  # tp_size x dp_size, when the server says
    server_info: dict[str, Any] | None = None
    models: dict[str, Any] | None = None
    model_info: dict[str, Any] | None = None
    metrics: dict[str, float] | None = None
    unreadable: dict[str, str] = field(default_factory=dict)  # endpoint -> why


async def read_server_facts(client: EndpointClient, timeout: float = 10.0) -> ServerFacts:
    facts = ServerFacts()
    facts.models = await _json(client, "/v1/models", facts, timeout)
    for path in serverfields.SERVER_INFO_PATHS:  # 0.5.23's name first; older servers: /get_server_info
        facts.server_info = await _json(client, path, facts, timeout)
        if facts.server_info is not None:
            facts.unreadable.pop("/server_info", None)
            break
    for path in serverfields.MODEL_INFO_PATHS:  # /get_model_info is deprecated in 0.5.23
        facts.model_info = await _json(client, path, facts, timeout)
        if facts.model_info is not None:
            facts.unreadable.pop("/model_info", None)
            break
    facts.metrics = await read_metrics(client, facts, timeout)

    data = (facts.models or {}).get("data") or []
    first = data[0] if data and isinstance(data[0], dict) else {}
    facts.model_id = first.get("id")
    info = facts.server_info or {}
    facts.context_length = serverfields.context_length(facts.models, info, facts.model_info)[0]
    facts.max_total_tokens = serverfields.kv_pool_tokens(info)
    facts.max_running_requests = serverfields.running_limit(info)[0]
    tp, dp = _int(info.get("tp_size")), _int(info.get("dp_size"))
    if tp:
        facts.gpus = tp * (dp or 1)
    return facts


def server_side_figures(facts_after: ServerFacts, peaks: dict[str, float] | None = None,
                        window: Any = None) -> dict[str, float]:
    """The figures only the server knows, over the measured phases: speculative accept length and
    cached-token share from /metrics counter differences (`window`, a metrics_window.Window), and
    the peaks of KV token usage and running requests sampled during the run. The gauges
    (sglang:spec_accept_length, sglang:cache_hit_rate) cover only SGLang's last logging window
    and avg_spec_accept_length is cumulative since start, so neither is a figure of this run."""
    out: dict[str, float] = dict(peaks or {})
    if window is not None and window.measured:
        if window.spec_accept_length is not None:
            out["spec_accept_length"] = window.spec_accept_length
        if window.cached_share is not None:
            out["cache_hit_rate"] = window.cached_share
    return out


async def read_metrics(client: EndpointClient, facts: ServerFacts, timeout: float) -> dict[str, float] | None:
    try:
        response = await client.get("/metrics", timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - any failure means "not available", recorded
        facts.unreadable["/metrics"] = f"{type(exc).__name__}: {exc}"
        return None
    if response.status_code != 200:
        facts.unreadable["/metrics"] = f"HTTP {response.status_code}"
        return None
    return parse_prometheus(response.text)


# Gauges worth their peak during a run: /metrics name -> figure key.
PEAK_GAUGES = {"sglang:token_usage": "token_usage_peak", "sglang:num_running_reqs": "running_requests_peak",
               "sglang:num_queue_reqs": "queued_requests_peak"}


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text format -> {metric name: one value over its label sets (dp ranks, ...)}:
    counters and counts are summed (`_total`, `num_*`, and a histogram's `_count`/`_sum`/`_bucket`);
    gauges and ratios (token_usage, cache_hit_rate, spec_accept_length, ...) take the max, since a
    sum of fractions or averages means nothing."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name_part, _, rest = line.partition(" ") if "{" not in line.split(" ")[0] else _split_labels(line)
        try:
            value = float(rest.split()[0])
        except (ValueError, IndexError):
            continue
        if name_part not in out:
            out[name_part] = value
        elif _is_summed(name_part):
            out[name_part] += value
        else:
            out[name_part] = max(out[name_part], value)
    return out


_SUMMED_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def _is_summed(name: str) -> bool:
    """Counters and counts add up across label sets; everything else is a gauge or a ratio."""
    return name.endswith(_SUMMED_SUFFIXES) or name.rpartition(":")[2].startswith("num_")


def _split_labels(line: str) -> tuple[str, str, str]:
    name, _, tail = line.partition("{")
    _, _, rest = tail.partition("}")
    return name, "", rest.strip()


async def _json(client: EndpointClient, path: str, facts: ServerFacts, timeout: float) -> dict[str, Any] | None:
    try:
        response = await client.get(path, timeout=timeout)
        if response.status_code != 200:
            facts.unreadable[path] = f"HTTP {response.status_code}"
            return None
        body = redact(response.json())  # SGLang's /server_info carries the api_key: a report keeps no key
        return body if isinstance(body, dict) else {"value": body}
    except Exception as exc:  # noqa: BLE001 - recorded, never fatal
        facts.unreadable[path] = f"{type(exc).__name__}: {exc}"
        return None


def _int(*candidates: Any) -> int | None:
    for value in candidates:
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and value > 0:
            return int(value)
    return None
