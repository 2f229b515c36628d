"""One streamed request as bench sends it (the payload) and as it keeps it (the record)."""

from __future__ import annotations

from typing import Any

from ..server.chat_result import ChatResult
from .method import BenchMethod
from .results import RequestRecord
from .spec import Spec


def chat_payload(
    method: BenchMethod, model_id: str, messages: list[dict[str, Any]], max_tokens: int
) -> dict[str, Any]:
    return {
        "model": model_id,
        "messages": messages,
        "max_tokens": max_tokens,
        # ignore_eos makes every request produce exactly max_tokens (SGLang and the sim both
        # honour it), so output lengths are the method's, not the model's whim.
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": method.sampling_temperature,
        "chat_template_kwargs": {"enable_thinking": method.thinking},
    }


def request_record(
    spec: Spec, prefix: str, estimated: int, result: ChatResult, *, t0: float, repeat: int
) -> RequestRecord:
    """The record of one request; its times are seconds since the run's start `t0`."""
    usage = result.usage or {}
    completion = usage.get("completion_tokens")
    chunks = len(result.chunk_times)
    output = completion if isinstance(completion, int) else (chunks or None)
    reasoning, answer = split_reasoning(result, output)

    def rel(t: float | None) -> Any:
        return None if t is None else round(t - t0, 6)

    return RequestRecord(
        phase=spec.phase,
        group=spec.group,
        concurrency=spec.concurrency,
        index=spec.index,
        ok=result.ok,
        error=result.error,
        status=result.status,
        prompt_prefix=prefix,
        prompt_tokens_estimated=estimated,
        prompt_tokens=usage.get("prompt_tokens"),
        cached_tokens=result.cached_tokens,
        max_tokens=spec.max_tokens,
        output_tokens=output,
        output_tokens_source=("usage" if isinstance(completion, int) else "chunks") if output else None,
        reasoning_tokens=reasoning,
        answer_tokens=answer,
        finish_reason=result.finish_reason,
        start=rel(result.t_start),
        first_token=rel(result.t_first_token),
        first_answer=rel(result.t_first_answer),
        last_token=rel(result.chunk_times[-1]) if result.chunk_times else None,
        end=rel(result.t_end),
        chunk_offsets=[round(t - result.t_start, 6) for t in result.chunk_times],
        repeat=repeat,
        conversation=spec.conversation,
        turn=spec.turn,
        scheduled=spec.scheduled,
    )


def split_reasoning(result: ChatResult, output: int | None) -> tuple[int | None, int | None]:
    """Reasoning vs answer tokens: the server's completion_tokens_details when it gives them,
    else the output split in proportion to reasoning vs answer chunks."""
    if output is None:
        return None, None
    details = (result.usage or {}).get("completion_tokens_details") or {}
    if isinstance(details.get("reasoning_tokens"), int):
        return details["reasoning_tokens"], output - details["reasoning_tokens"]
    if not result.reasoning_content:
        return 0, output
    reasoning_chunks, answer_chunks = result.reasoning_chunks, result.answer_chunks
    total = reasoning_chunks + answer_chunks
    if total == 0:
        return 0, output
    reasoning = round(output * reasoning_chunks / total)
    return reasoning, output - reasoning
