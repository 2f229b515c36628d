"""The fast paths a profile expects (`qualify.preflight.expect`), compared with what the server
reports: a release that silently lost speculative decoding, CUDA graphs for decode, its MoE
runner or part of its KV pool fails preflight, naming the difference.

Field names are SGLang 0.5.23's own (`/server_info` = `ServerArgs.resolved_dict()` plus the
scheduler info, `build_server_info` in srt/utils/common.py; scheduler figures such as
`avg_spec_accept_length` sit in `internal_states`, srt/managers/scheduler_components/internal_state.py):

* `speculative_algorithm`: after resolution, `NEXTN` (MTP) is reported as `EAGLE`
  (srt/arg_groups/speculative_hook.py), so `NEXTN` in a profile is compared as `EAGLE`.
* accept length: over this qualification's own window, from the Prometheus counters
  `sglang:generation_tokens_total` / `sglang:spec_verify_calls_total` (tokens per verify step,
  srt/observability/metrics_collector.py) read before and after a few generations through
  deploytool.server.metrics_window; without those counters (no --enable-metrics, or no speculative
  decoding), the `avg_spec_accept_length` of `/server_info` read after the same window.
* decode CUDA graphs: off when `disable_cuda_graph` or `disable_decode_cuda_graph` is true or
  `cuda_graph_config.decode.backend` / `cuda_graph_backend_decode` is `disabled`
  (srt/arg_groups/fields/exec_.py, srt/arg_groups/cuda_graph_hook.py).
* `moe_runner_backend`, `max_total_num_tokens` (KV pool) as reported.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ....errors import FieldError
from ....server import metrics_window as mw
from ....server.serverfields import find_key
from ...context import SuiteClient
from ...suite_api import Gate

# SGLang's resolution renames these (srt/arg_groups/speculative_hook.py).
SPEC_ALIASES = {"NEXTN": "EAGLE"}
WINDOW_PROMPT = "Write a short paragraph about the history of lighthouses."


class Expectations(BaseModel):
    """`qualify.preflight.expect`: each unset field is not checked."""

    model_config = ConfigDict(extra="forbid")

    speculative_algorithm: str | None = Field(
        default=None, description="e.g. EAGLE (NEXTN/MTP reports as EAGLE)."
    )
    min_accept_length: float | None = Field(
        default=None, gt=0, description="Tokens per verify step, over the window."
    )
    decode_cuda_graph: bool | None = Field(
        default=None, description="True: CUDA graphs must be on for decode."
    )
    moe_runner_backend: str | None = Field(default=None, description="e.g. cutlass.")
    min_kv_tokens: int | None = Field(
        default=None, ge=1, description="KV pool (max_total_num_tokens) at least."
    )
    window_requests: int = Field(default=4, ge=1, description="Generations in the accept-length window.")
    window_max_tokens: int = Field(default=128, ge=8)

    def is_empty(self) -> bool:
        return all(
            getattr(self, f) is None
            for f in (
                "speculative_algorithm",
                "min_accept_length",
                "decode_cuda_graph",
                "moe_runner_backend",
                "min_kv_tokens",
            )
        )


def decode_cuda_graph_on(info: dict[str, Any] | None) -> tuple[bool | None, str]:
    """Whether decode runs with CUDA graphs, and the fields that said so (None: not reported)."""
    if not info:
        return None, "server info not read"
    evidence = []
    for key in ("disable_cuda_graph", "disable_decode_cuda_graph"):
        value = find_key(info, key)
        if value is not None:
            evidence.append(f"{key}={value}")
            if value is True:
                return False, ", ".join(evidence)
    config = find_key(info, "cuda_graph_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            config = None
    backend = (config or {}).get("decode", {}).get("backend") if isinstance(config, dict) else None
    backend = backend or find_key(info, "cuda_graph_backend_decode")
    if backend is not None:
        evidence.append(f"decode backend={backend}")
        if str(backend).lower() == "disabled":
            return False, ", ".join(evidence)
    if not evidence:
        return None, "neither disable_cuda_graph, disable_decode_cuda_graph nor cuda_graph_config is reported"
    return True, ", ".join(evidence)


def static_gates(expect: Expectations, info: dict[str, Any] | None) -> list[Gate]:
    """Gates on what /server_info says about the configuration (no request needed)."""
    gates: list[Gate] = []
    where = "server info"
    if expect.speculative_algorithm is not None:
        want = SPEC_ALIASES.get(expect.speculative_algorithm.upper(), expect.speculative_algorithm.upper())
        got = find_key(info, "speculative_algorithm")
        gates.append(
            Gate(
                name="speculative algorithm",
                threshold=want,
                measured=got,
                passed=got is not None and str(got).upper() == want,
                comparison="==",
                detail=(
                    "speculative decoding is off: the server reports no speculative_algorithm"
                    if got is None
                    else f"{where} reports speculative_algorithm={got}"
                ),
            )
        )
    if expect.decode_cuda_graph is not None:
        on, evidence = decode_cuda_graph_on(info)
        gates.append(
            Gate(
                name="CUDA graphs for decode",
                threshold="on" if expect.decode_cuda_graph else "off",
                measured=None if on is None else ("on" if on else "off"),
                passed=on is expect.decode_cuda_graph,
                comparison="==",
                detail=evidence,
            )
        )
    if expect.moe_runner_backend is not None:
        got = find_key(info, "moe_runner_backend")
        gates.append(
            Gate.equal(
                "MoE runner backend",
                got,
                expect.moe_runner_backend,
                detail="" if got is not None else f"{where} does not report moe_runner_backend",
            )
        )
    if expect.min_kv_tokens is not None:
        got = find_key(info, "max_total_num_tokens")
        gates.append(
            Gate.at_least(
                "KV pool tokens (max_total_num_tokens)",
                got,
                expect.min_kv_tokens,
                detail="" if got is not None else f"{where} does not report max_total_num_tokens",
            )
        )
    return gates


async def accept_length_in_window(
    client: SuiteClient, model: str | None, expect: Expectations
) -> dict[str, Any]:
    """Send a few greedy generations and measure the accept length over them: the counter
    difference over the window (deploytool.server.metrics_window, the one /metrics reader), else the
    server info's cumulative figure read after it."""
    before = await mw.snapshot(client)
    errors = []
    for i in range(expect.window_requests):
        payload = {
            "model": model or "default",
            "temperature": 0,
            "max_tokens": expect.window_max_tokens,
            "messages": [{"role": "user", "content": f"{WINDOW_PROMPT} (Variant {i + 1}.)"}],
            "chat_template_kwargs": {"enable_thinking": False},
        }
        result = await client.chat(payload)
        if result.error:
            errors.append(result.error)
    window = mw.window(before, await mw.snapshot(client))
    value = window.spec_accept_length
    if value is not None:
        return {
            "accept_length": round(value, 3),
            "source": "metrics counters over the window",
            "window": window.to_json(),
            "errors": errors,
        }
    why = window.why or f"/metrics has no {mw.VERIFY} increase"
    try:
        info = await client.get_json("/server_info", timeout=10)
    except Exception as exc:
        return {"accept_length": None, "source": f"{why}; server info unreadable: {exc}", "errors": errors}
    value = find_key(info, "avg_spec_accept_length")
    return {
        "accept_length": value,
        "source": f"{why}; avg_spec_accept_length in /server_info after the window",
        "errors": errors,
    }


def accept_length_gate(expect: Expectations, window: dict[str, Any]) -> Gate:
    if expect.min_accept_length is None:
        raise FieldError(
            "qualify.preflight.expect.min_accept_length", "not set: there is no accept length to gate on"
        )
    got = window.get("accept_length")
    detail = f"{window.get('source')}; {expect.window_requests} greedy generations of {expect.window_max_tokens} tokens"
    if window.get("errors"):
        detail += f"; {len(window['errors'])} failed: {window['errors'][0]}"
    if got is None:
        detail = "no accept length reported (is speculative decoding on?); " + detail
    return Gate.at_least("speculative accept length", got, expect.min_accept_length, detail=detail)


async def evaluate(ctx: Any, expect: Expectations) -> tuple[list[Gate], dict[str, Any]]:
    """Preflight's hook: the gates of `qualify.preflight.expect` and the figures behind them."""
    if expect.is_empty():
        return [], {}
    info = ctx.server.server_info
    gates = static_gates(expect, info)
    figures: dict[str, Any] = {"expected": expect.model_dump(exclude_none=True)}
    on, evidence = decode_cuda_graph_on(info)
    figures["decode_cuda_graph"] = {"on": on, "evidence": evidence}
    if expect.min_accept_length is not None:
        window = await accept_length_in_window(ctx.client, ctx.server.served_model_name, expect)
        figures["accept_length_window"] = window
        gates.append(accept_length_gate(expect, window))
    return gates, figures
