"""contract: the new deployment serves what the gateway expects.

Compared with the previous release on the same slot (its results.json) when there is one,
else with the profile: the served model name, the port the server listens on, the context
length; and, by sending two small chats, the thinking default (a request that does not say
must not think, unless the profile says otherwise) and that reasoning text arrives in
`reasoning_content`, not inline in `content` as <think>...</think>.

The thinking default is measured, never inferred from flags: with --reasoning-parser qwen3 or
glm45, SGLang 0.5.23 thinks unless the request says enable_thinking: false (the parsers' mode
"enable_thinking", sglang/srt/entrypoints/openai/serving_chat.py `_get_reasoning_from_request`);
--default-chat-template-kwargs '{"enable_thinking": false}' turns that default off. The server's
reasoning parser and default kwargs are recorded beside the measurement.

It also records which weights the release serves (hub repository and commit, or
the folder's fingerprint) and says, in its figures, when they differ from the previous
release's: new weights are a legitimate deploy, so that is a note, not a gate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ...server.client import ChatResult
from ...server.facts import ServerFacts
from ...server.serverfields import find_key
from ..context import SuiteContext, chat_payload
from ..suite_api import Gate, SuiteResult, SuiteSettings, Verdict, previous_suite
from ..transcripts import transcript

name = "contract"

PROMPT = "Reply with one short sentence: which ocean lies between Europe and North America?"


class Settings(SuiteSettings):
    thinking_default: Literal["off", "on"] = Field(
        default="off", description="Expected when a request does not say."
    )
    require_reasoning_field: bool = Field(
        default=True, description="Reasoning must arrive in reasoning_content."
    )
    max_tokens: int = Field(default=1024, ge=16, description="Room for the thinking-on answer.")
    request_timeout_s: float = 120.0


def applies_to(profile: Any, server: ServerFacts) -> str | None:
    return None


def load_previous(path: Path | None) -> tuple[dict[str, Any] | None, str | None]:
    """The previous release's contract figures, or (None, why not)."""
    suite, why = previous_suite(path, name, lambda s: s.get("verdict") == "passed")
    if suite is None:
        return None, why and f"{why}; compared with the profile"
    return (suite.get("figures") or {}).get("measured") or {}, None


def reasoning_placement(result: ChatResult) -> str:
    """Where the reasoning text went: 'reasoning_content', 'content' (inline <think>), or 'none'."""
    if result.reasoning_content.strip():
        return "reasoning_content"
    if "</think>" in result.content or result.content.lstrip().startswith("<think>"):
        return "content"
    return "none"


async def run(ctx: SuiteContext[Settings]) -> SuiteResult:
    s = ctx.settings
    result = SuiteResult(name=name, verdict=Verdict.ERROR)
    notes: list[str] = []
    ctx.set_total(2)

    default_payload = chat_payload(ctx, [{"role": "user", "content": PROMPT}], max_tokens=s.max_tokens)
    default = await ctx.client.chat(default_payload)
    ctx.advance()
    on_payload = chat_payload(
        ctx, [{"role": "user", "content": PROMPT}], thinking=True, max_tokens=s.max_tokens
    )
    thinking_on = await ctx.client.chat(on_payload)
    ctx.advance()

    measured, configured = _measured(ctx, default, thinking_on)
    previous, why_not = load_previous(ctx.previous_results)
    weights_changed = _weights_changed(previous, measured["model"], notes)
    if why_not:
        notes.append(why_not)
    basis, expected = _expected(ctx, previous)
    result.gates += _served_gates(measured, expected, basis, notes)
    result.gates += _thinking_gates(s, measured, configured, default, thinking_on)

    result.figures = {
        "measured": measured,
        "expected": expected,
        "compared_with": basis,
        "weights_changed": weights_changed,
        "notes": notes,
        "server_configuration": configured,
    }
    result.method = (
        f"Read served name and context length from /v1/models and the port from {ctx.server.server_info_path or 'server info'}; "
        f"compared with the {basis}. Sent one chat without chat_template_kwargs (thinking default) and one with "
        f"enable_thinking=true (greedy, max_tokens {s.max_tokens}); reasoning must come back in reasoning_content."
    )
    for label, payload, res in (
        ("default", default_payload, default),
        ("thinking-on", on_payload, thinking_on),
    ):
        result.transcripts.append(transcript(label, payload, res, passed=res.ok))
    return result.judge()


def _served_gates(
    measured: dict[str, Any], expected: dict[str, Any], basis: str, notes: list[str]
) -> list[Gate]:
    """Served name, port and context length against what the basis expects; what cannot be
    compared (the basis does not say, the server does not report) is a note, not a gate."""
    gates = []
    for key, want in expected.items():
        got = measured[key]
        if want is None:
            notes.append(f"{key}: the {basis} does not say; measured {got!r}")
        elif got is None:
            notes.append(f"{key}: the server does not report it; expected {want!r}, not checked")
        else:
            gates.append(Gate.equal(key, got, want, detail=f"compared with the {basis}"))
    return gates


def _thinking_gates(
    s: Settings,
    measured: dict[str, Any],
    configured: dict[str, Any],
    default: ChatResult,
    thinking_on: ChatResult,
) -> list[Gate]:
    """The two chats answered, the thinking default as expected, reasoning in its own field."""
    gates = []
    for probe, res in (("default (no enable_thinking)", default), ("enable_thinking=true", thinking_on)):
        if res.error:
            gates.append(
                Gate(
                    name=f"request {probe} succeeds",
                    threshold="no error",
                    measured=res.error,
                    passed=False,
                    comparison="==",
                    detail=res.error,
                )
            )
    if measured["thinking_default"] is not None:
        gates.append(
            Gate.equal(
                "thinking default",
                measured["thinking_default"],
                s.thinking_default,
                detail=_thinking_detail(default, s.thinking_default, configured),
            )
        )
    if s.require_reasoning_field and measured["reasoning_field"] is not None:
        gates.append(
            Gate.equal(
                "reasoning arrives in",
                measured["reasoning_field"],
                "reasoning_content",
                detail=_reasoning_detail(thinking_on),
            )
        )
    return gates


def _measured(
    ctx: SuiteContext[Settings], default: ChatResult, thinking_on: ChatResult
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the server serves and how it thinks, and what it says it runs with (recorded to
    explain the measured default)."""
    measured = {
        "served_model_name": ctx.server.served_model_name,
        "port": find_key(ctx.server.server_info, "port"),
        "context_length": ctx.server.max_model_len,
        "thinking_default": None
        if default.error
        else ("off" if reasoning_placement(default) == "none" else "on"),
        "reasoning_field": None if thinking_on.error else reasoning_placement(thinking_on),
        "model": ((ctx.target.model if ctx.target else None) or {}).get("identity"),
    }
    configured = {
        "reasoning_parser": find_key(ctx.server.model_info, "reasoning_parser")
        or find_key(ctx.server.server_info, "reasoning_parser"),
        "default_chat_template_kwargs": find_key(ctx.server.server_info, "default_chat_template_kwargs"),
    }
    return measured, configured


def _expected(ctx: SuiteContext[Settings], previous: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """What to compare served name, port and context length with, and that basis in words:
    the previous release's figures, else the profile's, else nothing."""
    if previous is not None:
        return (
            f"previous release ({ctx.previous_results})",
            {k: previous.get(k) for k in ("served_model_name", "port", "context_length")},
        )
    if ctx.profile is not None:
        return (
            f"profile {ctx.profile.name!r}",
            {
                "served_model_name": ctx.profile.model.served_name,
                "port": ctx.profile.server.port,
                "context_length": ctx.profile.model.context_length,
            },
        )
    return "no previous release and no profile: served name, port and context length are recorded only", {}


def _weights_changed(previous: dict[str, Any] | None, model: str | None, notes: list[str]) -> bool | None:
    """True/False when both releases say which weights they serve, else None (unknown)."""
    before = (previous or {}).get("model")
    if previous is None or before is None or model is None:
        return None
    if before != model:
        notes.append(f"serves other weights than the previous release: {before} -> {model}")
        return True
    return False


def _thinking_detail(res: ChatResult, expected: str, configured: dict[str, Any]) -> str:
    where = reasoning_placement(res)
    if where == "none":
        text = "a request without enable_thinking produced no reasoning"
        if expected == "on":
            text += "; is the server's reasoning parser set, and does default-chat-template-kwargs turn thinking off?"
        return text
    text = f"a request without enable_thinking produced reasoning (in {where})"
    if expected == "off":
        text += (
            f"; the gateway expects thinking off by default: with reasoning parser "
            f"{configured.get('reasoning_parser') or '(unknown)'} SGLang thinks unless told, so set the "
            "server arg default-chat-template-kwargs: '{\"enable_thinking\": false}'"
        )
    return text


def _reasoning_detail(res: ChatResult) -> str:
    where = reasoning_placement(res)
    if where == "content":
        return (
            "with enable_thinking=true the reasoning came inline in content as <think>...</think>, not in "
            "reasoning_content: is the server's reasoning parser (--reasoning-parser) set?"
        )
    if where == "none":
        return "with enable_thinking=true no reasoning came back at all"
    return "reasoning_content carried the reasoning"
