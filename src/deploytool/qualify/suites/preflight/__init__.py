"""preflight: is the server healthy, and is it configured the way the profile needs?

Records what the server says about itself (/v1/models, /server_info, /model_info), the card
from NVML for a GPU slot, and the image's labels and id, then gates on: /health_generate is
200 (a real generation, not just a live process), the KV pool holds at least one full-context
conversation, and the running-request limit is at least the profile's minimum. A silently
disabled fast path (no CUDA graphs, no speculative decoding, a smaller KV pool) shows up here first.

The running-request limit is SGLang 0.5.23's internal_states[].effective_max_running_requests_per_dp
times the DP ranks (deploytool.server.serverfields): the top-level max_running_requests is the flag as
given, null when it was not.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field

from ....server import serverfields
from ....server.facts import ServerFacts
from ....server.readiness import READY_TIMEOUT_S
from ....server.serverfields import find_key
from ...context import SuiteContext
from ...suite_api import Gate, SuiteResult, SuiteSettings, Verdict
from .expectations import Expectations
from .expectations import evaluate as evaluate_expectations

name = "preflight"

# Server-info keys worth a line in the report: the fast paths and their sizes.
RECORDED_KEYS = (
    "version",
    "model_path",
    "served_model_name",
    "context_length",
    "max_total_num_tokens",
    "max_running_requests",
    "max_req_input_len",
    "chunked_prefill_size",
    "tp_size",
    "dp_size",
    "mem_fraction_static",
    "kv_cache_dtype",
    "quantization",
    "attention_backend",
    "sampling_backend",
    # CUDA graphs: 0.5.23's per-phase keys; the single ones are what older servers report
    "cuda_graph_max_bs_decode",
    "cuda_graph_max_bs_prefill",
    "disable_decode_cuda_graph",
    "disable_prefill_cuda_graph",
    "disable_cuda_graph",
    "cuda_graph_max_bs",
    "enable_torch_compile",
    "disable_radix_cache",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "avg_spec_accept_length",
    "reasoning_parser",
    "tool_call_parser",
    "enable_cache_report",
    "enable_metrics",
    "default_chat_template_kwargs",
)


class Settings(SuiteSettings):
    min_running_requests: int = Field(default=1, ge=1, description="Gate: the running-request limit >= this.")
    require_full_context_kv: bool = Field(default=True, description="Gate: KV pool >= one full context.")
    health_path: str = Field(default="/health_generate", description="Must answer 200.")
    ready_timeout_s: float = Field(
        default=READY_TIMEOUT_S,
        ge=0,
        description="How long to wait for a loading server: refused connections (weights loading) or 503 "
        "(warm-up); `qualify --ready-timeout` and `bench --ready-timeout` set it too.",
    )
    probe_timeout_s: float = Field(default=10.0, gt=0, description="Budget of each probe request.")
    request_timeout_s: float = 60.0
    expect: Expectations = Field(
        default_factory=Expectations,
        description="Fast paths the profile expects (qualify/suites/preflight/expectations.py).",
    )


def applies_to(profile: Any, server: ServerFacts) -> str | None:
    return None  # always: every endpoint has a health and a config to record


async def run(ctx: SuiteContext[Settings]) -> SuiteResult:
    s = ctx.settings
    server = ctx.server
    result = SuiteResult(name=name, verdict=Verdict.ERROR)
    ctx.set_total(3)

    health = await _health_generate(ctx, s)
    ctx.advance()
    info = server.server_info or {}
    figures = _figures(ctx, s, health, info)
    running, running_source = figures["running_limit"], figures["running_limit_source"]
    result.figures = figures

    result.gates.append(
        Gate.equal(f"{s.health_path} status", health["status"], 200, detail=health.get("error") or "")
    )
    context = ctx.context_length
    result.gates += _kv_gates(s, server, info, context)
    result.gates.append(
        Gate.at_least(
            "running-request limit",
            running,
            s.min_running_requests,
            detail=(
                f"from {running_source}"
                if running is not None
                else "server info reports neither effective_max_running_requests_per_dp nor max_running_requests"
            ),
        )
    )
    expect_gates, figures["expect"] = await evaluate_expectations(ctx, s.expect)
    result.gates += expect_gates
    result.method = _method(s, server, running_source, context)
    if health["status"] != 200:
        result.transcripts.append({"case": s.health_path, "passed": False, **health})
    return result.judge()


def _figures(
    ctx: SuiteContext[Settings], s: Settings, health: dict[str, Any], info: dict[str, Any]
) -> dict[str, Any]:
    """What the server says it runs with, the memory plan beside it, the GPUs and the image."""
    server = ctx.server
    figures: dict[str, Any] = {
        "health_path": s.health_path,
        "health_status": health["status"],
        "health_latency_s": health["latency_s"],
        "served_model_name": server.served_model_name,
        "max_model_len": server.max_model_len,
        "server_info_path": server.server_info_path,
    }
    figures.update({k: find_key(info, k) for k in RECORDED_KEYS if find_key(info, k) is not None})
    running, running_source = serverfields.running_limit(info)
    figures["running_limit"] = running
    figures["running_limit_source"] = running_source
    figures["memory_usage"] = serverfields.memory_usage(info) or None
    figures["weight_version"] = server.weight_version
    figures["waited_for_ready_s"] = server.waited_s
    figures["model_info"] = server.model_info
    figures["gpu"] = _gpu_inventory(ctx)
    # the memory plan's prediction beside what the server reports, and its error
    from ....memory.profile_plan import plan_next_to_server

    figures["memory_plan"] = plan_next_to_server(ctx.profile, ctx.target.slot if ctx.target else None, info)
    ctx.advance()
    figures["image"] = _image_record(ctx)
    ctx.advance()
    return figures


def _kv_gates(s: Settings, server: ServerFacts, info: dict[str, Any], context: int | None) -> list[Gate]:
    """The KV pool must hold one full context (when the profile asks it to)."""
    if not s.require_full_context_kv:
        return []
    kv = find_key(info, "max_total_num_tokens")
    kv_gate = "KV pool tokens (max_total_num_tokens) >= context length"
    if context is None:  # nothing to compare with: never a pass against 0
        return [
            Gate(
                name=kv_gate,
                threshold="context length",
                measured=kv,
                passed=False,
                comparison=">=",
                detail="context length not reported",
            )
        ]
    return [
        Gate.at_least(
            kv_gate,
            kv,
            context,
            detail=""
            if kv is not None
            else f"{server.server_info_path or 'server info'} does not report max_total_num_tokens",
        )
    ]


def _method(s: Settings, server: ServerFacts, running_source: Any, context: int | None) -> str:
    return (
        f"GET {s.health_path} (timeout {s.probe_timeout_s:g} s); GET /v1/models, "
        f"{server.server_info_path or '/server_info and /get_server_info (neither answered)'}, "
        f"{server.model_info_path or '/model_info and /get_model_info (neither answered)'} read once before the "
        f"suites ran (ready after {server.waited_s:g} s); running-request limit from {running_source}; NVML via deploytool.host.gpus for a GPU slot; the image's labels from the engine. "
        + (
            f"Context length compared with the KV pool: {context} tokens "
            f"({'from /v1/models max_model_len' if server.max_model_len else 'from the profile'})."
            if context is not None
            else "Context length: reported neither by the server nor by the profile."
        )
    )


async def _health_generate(ctx: SuiteContext[Settings], s: Settings) -> dict[str, Any]:
    started = time.perf_counter()
    answer = await ctx.client.health(s.health_path, timeout=s.probe_timeout_s)
    if answer.status is None:
        out: dict[str, Any] = {"status": None, "error": f"GET {s.health_path} failed: {answer.error}"}
    else:
        out = {"status": answer.status, "body": answer.body}
        if answer.status != 200:
            out["error"] = f"GET {s.health_path} answered HTTP {answer.status}: {answer.body[:120].strip()}"
    out["latency_s"] = round(time.perf_counter() - started, 4)
    return out


def _gpu_inventory(ctx: SuiteContext[Settings]) -> dict[str, Any] | None:
    """The slot's cards from NVML; None for the CPU slot or a bare URL."""
    slot = ctx.target.slot if ctx.target else None
    uuids = list(slot.gpus if slot is not None else ())
    if not uuids:
        return None
    try:
        from ....host.gpus import read_inventory  # NVML; absent on machines without a driver

        inventory = read_inventory()
    except Exception as exc:  # ImportError, NVML errors: record, never fail the suite for it
        return {"uuids": uuids, "error": f"no NVML: {type(exc).__name__}: {exc}"}
    if inventory.error:
        return {"uuids": uuids, "error": f"no NVML: {inventory.error}"}
    cards = [_as_dict(gpu) for gpu in inventory.gpus if gpu.uuid in uuids]
    missing = [u for u in uuids if u not in {c.get("uuid") for c in cards}]
    return {
        "uuids": uuids,
        "cards": cards,
        **({"error": f"not found by NVML: {', '.join(missing)}"} if missing else {}),
    }


def _as_dict(obj: Any) -> dict[str, Any]:
    from dataclasses import asdict, is_dataclass

    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if hasattr(obj, "__dict__"):
        return {k: v for k, v in vars(obj).items() if not k.startswith("_")}
    return {"repr": repr(obj)}


def _image_record(ctx: SuiteContext[Settings]) -> dict[str, Any] | None:
    release = ctx.target.release if ctx.target else None
    if ctx.target is None or release is None:
        return None
    record: dict[str, Any] = {"reference": release.image, "labels": dict(ctx.target.image_labels or {})}
    try:
        from ....host.engine import Engine

        image = Engine().image(release.image)
        if image is not None:
            record["id"] = image.id
            record["repo_digests"] = list(image.attrs.get("RepoDigests") or [])
    except Exception as exc:  # no engine here: the labels from the target are still recorded
        record["id_error"] = f"{type(exc).__name__}: {exc}"
    return record
