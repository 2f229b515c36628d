"""What the server says about itself: /v1/models, /server_info (or /get_server_info),
/model_info (or /get_model_info) and /metrics. Every endpoint is optional; a server that lacks one is benchmarked
all the same, and the run records what it could not read."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..redaction import redact
from . import serverfields, wire
from .client import EndpointClient


@dataclass
class ServerFacts:
    """What a server says about itself, read once through the endpoint: qualify's probe (with the
    ready-wait's outcome: reachable, ready, waited_s) and bench's facts before and after a run.
    Each field None when the server did not say; `unreadable` says why, per endpoint."""

    url: str | None = None
    reachable: bool = False
    ready: bool = False
    health_status: int | None = None
    error: str | None = None
    models: dict[str, Any] | None = None  # /v1/models
    server_info: dict[str, Any] | None = None  # /server_info or /get_server_info
    server_info_path: str | None = None
    model_info: dict[str, Any] | None = None  # /model_info (or /get_model_info)
    model_info_path: str | None = None
    unauthorized: bool = False  # /v1/models answered 401 (the server wants an API key)
    waited_s: float = 0.0  # how long the server took to become ready
    # /model_info weight_version when read, and at the end of a run (a change is reported)
    weight_version: str | None = None
    weight_version_at_end: str | None = None
    model_id: str | None = None
    context_length: int | None = None
    max_total_tokens: int | None = None
    max_running_requests: int | None = None
    gpus: int | None = None  # tp_size x dp_size, when the server says
    metrics: dict[str, float] | None = None
    unreadable: dict[str, str] = field(default_factory=dict)  # endpoint -> why

    @property
    def weight_version_changed(self) -> bool:
        return self.weight_version_at_end is not None and self.weight_version_at_end != self.weight_version

    @property
    def is_simulator(self) -> bool:
        """deploytool's reference runtime says so in its server info and model info."""
        return (
            bool((self.server_info or {}).get("simulator"))
            or (self.model_info or {}).get("model_type") == "simulator"
        )

    @property
    def served_model_name(self) -> str | None:
        data = (self.models or {}).get("data")
        first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
        return first["id"] if isinstance(first.get("id"), str) else None

    @property
    def max_model_len(self) -> int | None:
        """/v1/models max_model_len (SGLang's effective context length); the server info's
        context_length only as a fallback (0.5.23 reports the flag there, null when not given)."""
        return serverfields.context_length(self.models, self.server_info, self.model_info)[0]

    @property
    def running_limit(self) -> int | None:
        return serverfields.running_limit(self.server_info)[0]

    @property
    def has_vision(self) -> bool | None:
        """SGLang's /model_info says `has_image_understanding` (older: is_multimodal)."""
        info = self.model_info or {}
        for key in ("has_image_understanding", "is_multimodal", "is_vision"):
            if key in info:
                return bool(info[key])
        return None


async def read_server_facts(
    client: EndpointClient, timeout: float = 10.0, *, metrics: bool = True, facts: ServerFacts | None = None
) -> ServerFacts:
    """/v1/models, server info, model info (and /metrics unless `metrics` is false), each within
    `timeout`, into `facts` (a new one by default). Never raises: an endpoint that fails is recorded
    in `unreadable`."""
    facts = facts or ServerFacts(url=client.base_url)
    read = _Reader(client, facts, timeout)
    facts.models = await read.json("/v1/models")
    facts.unauthorized = facts.unreadable.get("/v1/models") == "HTTP 401"
    for path in serverfields.SERVER_INFO_PATHS:  # 0.5.23's name first; older servers: /get_server_info
        facts.server_info = await read.json(path)
        if facts.server_info is not None:
            facts.server_info_path = path
            facts.unreadable.pop("/server_info", None)
            break
    for path in serverfields.MODEL_INFO_PATHS:  # /get_model_info is deprecated in 0.5.23
        facts.model_info = await read.json(path)
        if facts.model_info is not None:
            facts.model_info_path = path
            facts.unreadable.pop("/model_info", None)
            break
    if metrics:
        facts.metrics = await read.metrics()

    facts.model_id = facts.served_model_name
    info = facts.server_info or {}
    facts.context_length = facts.max_model_len
    facts.max_total_tokens = serverfields.kv_pool_tokens(info)
    facts.max_running_requests = facts.running_limit
    facts.weight_version = serverfields.weight_version(facts.model_info)
    tp, dp = _int(info.get("tp_size")), _int(info.get("dp_size"))
    if tp:
        facts.gpus = tp * (dp or 1)
    return facts


async def read_weight_version(client: EndpointClient, timeout: float = 10.0) -> str | None:
    """The model's weight_version now (qualify reads it again at the end of a run)."""
    read = _Reader(client, ServerFacts(), timeout)
    for path in serverfields.MODEL_INFO_PATHS:
        body = await read.json(path)
        if body is not None:
            return serverfields.weight_version(body)
    return None


def server_side_figures(
    facts_after: ServerFacts, peaks: dict[str, float] | None = None, window: Any = None
) -> dict[str, float]:
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
    except Exception as exc:
        facts.unreadable["/metrics"] = f"{type(exc).__name__}: {exc}"
        return None
    if response.status_code != 200:
        facts.unreadable["/metrics"] = f"HTTP {response.status_code}"
        return None
    return parse_prometheus(response.text)  # read within the body cap (EndpointClient.get)


# Gauges worth their peak during a run: /metrics name -> figure key.
PEAK_GAUGES = {
    "sglang:token_usage": "token_usage_peak",
    "sglang:num_running_reqs": "running_requests_peak",
    "sglang:num_queue_reqs": "queued_requests_peak",
}


def parse_prometheus(text: str) -> dict[str, float]:
    """Prometheus text format -> {metric name: one value over its label sets (dp ranks, ...)}:
    counters and counts are summed (`_total`, `num_*`, and a histogram's `_count`/`_sum`/`_bucket`);
    gauges and ratios (token_usage, cache_hit_rate, spec_accept_length, ...) take the max, since a
    sum of fractions or averages means nothing."""
    out: dict[str, float] = {}
    for name, _labels, value in parse_series(text):
        if name not in out:
            out[name] = value
        elif _is_summed(name):
            out[name] += value
        else:
            out[name] = max(out[name], value)
    return out


def parse_series(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus text format -> every sample as (name, labels, value), the labels kept: what a
    histogram's quantile needs (its `le` buckets), which parse_prometheus's one value per name
    cannot give. A line that does not parse is skipped, as Prometheus's own reader would refuse
    only that sample's target; a value that is not a number is skipped too."""
    out: list[tuple[str, dict[str, str], float]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head = line.split(" ")[0]
        if "{" in head:
            name, _, tail = line.partition("{")
            labels, rest = _read_labels(tail)
            if labels is None:
                continue
        else:
            name, _, rest = line.partition(" ")
            labels = {}
        try:
            value = float(rest.split()[0])
        except (ValueError, IndexError):
            continue
        out.append((name.strip(), labels, value))
    return out


_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _read_labels(tail: str) -> tuple[dict[str, str] | None, str]:
    """`a="x",le="0.1"} 3` -> ({a: x, le: 0.1}, "3"); (None, "") when the braces do not close.
    Label values may hold escaped quotes, commas, braces and spaces."""
    labels: dict[str, str] = {}
    position = 0
    while True:
        rest = tail[position:].lstrip()
        if rest.startswith("}"):
            return labels, rest[1:].strip()
        match = _LABEL.match(tail, position)
        if match is None:
            return None, ""
        labels[match.group(1)] = re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], match.group(2))
        position = match.end()


_SUMMED_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def _is_summed(name: str) -> bool:
    """Counters and counts add up across label sets; everything else is a gauge or a ratio."""
    return name.endswith(_SUMMED_SUFFIXES) or name.rpartition(":")[2].startswith("num_")


async def _json(
    client: EndpointClient, path: str, facts: ServerFacts, timeout: float
) -> dict[str, Any] | None:
    try:
        response = await client.get(path, timeout=timeout)
        if response.status_code != 200:
            facts.unreadable[path] = f"HTTP {response.status_code}"
            return None
        body = redact(
            wire.loads(response.content)
        )  # SGLang's /server_info carries the api_key: a report keeps no key
        return body if isinstance(body, dict) else {"value": body}
    except Exception as exc:
        facts.unreadable[path] = f"{type(exc).__name__}: {exc}"
        return None


class _Reader:
    """The facts' reads, one after another: once one has run out of time, the server is not
    waited on again for the rest (each recorded as not read), so a server that trickles its
    answers costs the facts one timeout, not one per endpoint."""

    def __init__(self, client: EndpointClient, facts: ServerFacts, timeout: float) -> None:
        self.client, self.facts, self.timeout = client, facts, timeout
        self.timed_out: str | None = None  # the first endpoint that ran out of time

    def _skip(self, path: str) -> bool:
        if self.timed_out is not None:
            self.facts.unreadable[path] = f"not read: {self.timed_out} timed out before it"
        return self.timed_out is not None

    def _note(self, path: str) -> None:
        if self.timed_out is None and self.facts.unreadable.get(path, "").startswith("TimeoutException"):
            self.timed_out = path

    async def json(self, path: str) -> dict[str, Any] | None:
        if self._skip(path):
            return None
        body = await _json(self.client, path, self.facts, self.timeout)
        self._note(path)
        return body

    async def metrics(self) -> dict[str, float] | None:
        if self._skip("/metrics"):
            return None
        return await read_metrics(self.client, self.facts, self.timeout)


def _int(*candidates: Any) -> int | None:
    for value in candidates:
        if isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and value > 0:
            return int(value)
    return None
