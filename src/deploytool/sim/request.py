"""Parse and validate a /v1/chat/completions body into a ChatRequest, or raise RequestError.

Validation mirrors what SGLang rejects with 400 (bad JSON, no messages, bad
sampling values, undecodable images, prompts that do not fit); unknown fields
are ignored, as SGLang's pydantic models ignore them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from deploytool.image_tokens import image_tokens
from deploytool.sim.settings import SimSettings
from deploytool.sim.tokens import message_tokens, tools_tokens
from deploytool.sim.vision import DecodedImage, ImageError, decode_image_url

ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


class RequestError(Exception):
    """An error answered in SGLang/OpenAI shape with an HTTP status."""

    def __init__(self, message: str, status: int = 400, err_type: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.status, self.err_type)


class KVPoolOverflow(RequestError):
    """A prompt that fits the context but not the KV pool (max_req_input_len): the scheduler
    aborts it (sglang/srt/managers/utils.py `validate_input_length`). Streamed, that is HTTP 200
    and an error event; not streamed, a 400."""

    def __init__(self, message: str, stream: bool) -> None:
        super().__init__(message)
        self.stream = stream


def error_body(message: str, status: int, err_type: str) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": status}


@dataclass
class Message:
    role: str
    text: str
    images: list[DecodedImage] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class ChatRequest:
    messages: list[Message]
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    temperature: float = 0.0
    seed: int | None = None
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    thinking: bool | None = None  # None: the server's --thinking-default
    separate_reasoning: bool = True
    response_format: dict[str, Any] | None = None
    prompt_tokens: int = 0
    prompt_key: str = ""  # serialized prompt, for the prefix cache

    @property
    def last_user(self) -> Message | None:
        return next((m for m in reversed(self.messages) if m.role == "user"), None)

    @property
    def full_text(self) -> str:
        return "\n".join(m.text for m in self.messages)


def parse_chat_request(body: bytes, settings: SimSettings) -> ChatRequest:
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"Invalid JSON in request body: {exc}") from None
    if not isinstance(data, dict):
        raise RequestError("The request body must be a JSON object")
    raw_messages = data.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise RequestError("'messages' is required and must be a non-empty list")

    messages = [_parse_message(m, i, settings) for i, m in enumerate(raw_messages)]
    req = ChatRequest(messages=messages)
    req.stream = bool(data.get("stream", False))
    options = data.get("stream_options") or {}
    req.include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    _parse_sampling(data, req)
    _parse_tools(data, req)
    _parse_thinking(data, req)
    fmt = data.get("response_format")
    req.response_format = fmt if isinstance(fmt, dict) and fmt.get("type") != "text" else None

    # images cost what Qwen's processor makes of their size (deploytool/image_tokens.py), not a flat rate
    req.prompt_tokens = sum(
        message_tokens(m.text, 0, m.tool_calls) + sum(image_tokens(*img.image.size) for img in m.images)
        for m in messages
    )
    req.prompt_tokens += tools_tokens(data.get("tools") if req.tools else None)
    req.prompt_key = _prompt_key(messages)
    check_fits(req, settings)
    return req


def check_fits(req: ChatRequest, settings: SimSettings) -> None:
    """Refuse prompts that cannot fit, at once, in SGLang's words (never hang on them)."""
    n = req.prompt_tokens
    if n >= settings.context_length:
        raise RequestError(
            f"The input ({n} tokens) is longer than the model's context length "
            f"({settings.context_length} tokens)."
        )
    limit = min(settings.context_length, settings.max_total_tokens) - 1  # max_req_input_len
    if n >= limit:
        raise KVPoolOverflow(
            f"Input length ({n} tokens) exceeds the maximum allowed length ({limit} tokens). "
            "Use a shorter input or enable --allow-auto-truncate.",
            req.stream,
        )
    if req.max_tokens is not None and req.max_tokens > settings.context_length:
        # serving_chat.py checks the output budget alone first, in these words (no space after
        # the full stop, as SGLang writes it)
        raise RequestError(
            f"max_completion_tokens is too large: {req.max_tokens}."
            f"This model supports at most {settings.context_length} completion tokens."
        )
    if req.max_tokens is not None and n + req.max_tokens > settings.context_length:
        raise RequestError(
            f"Requested token count exceeds the model's maximum context length of "
            f"{settings.context_length} tokens. You requested a total of {n + req.max_tokens} tokens: "
            f"{n} tokens from the input messages and {req.max_tokens} tokens for the completion. "
            f"Please reduce the number of tokens in the input messages or the completion to fit "
            f"within the limit."
        )


def _parse_message(raw: Any, index: int, settings: SimSettings) -> Message:
    if not isinstance(raw, dict):
        raise RequestError(f"messages[{index}] must be an object")
    role = raw.get("role")
    if role not in ROLES:
        raise RequestError(f"messages[{index}].role must be one of {sorted(ROLES)}, got {role!r}")
    texts, images = _parse_content(raw.get("content"), index, settings)
    if raw.get("reasoning_content"):
        texts.insert(0, str(raw["reasoning_content"]))
    calls = raw.get("tool_calls") or []
    if not isinstance(calls, list):
        raise RequestError(f"messages[{index}].tool_calls must be a list")
    return Message(role=role, text="\n".join(texts), images=images, tool_calls=calls)


def _parse_content(content: Any, index: int, settings: SimSettings) -> tuple[list[str], list[DecodedImage]]:
    if content is None:
        return [], []
    if isinstance(content, str):
        return [content], []
    if not isinstance(content, list):
        raise RequestError(f"messages[{index}].content must be a string or a list of content parts")
    texts: list[str] = []
    images: list[DecodedImage] = []
    for j, part in enumerate(content):
        where = f"messages[{index}].content[{j}]"
        if not isinstance(part, dict):
            raise RequestError(f"{where} must be an object")
        kind = part.get("type")
        if kind in ("text", "input_text"):
            if not isinstance(part.get("text"), str):
                raise RequestError(f"{where}.text must be a string")
            texts.append(part["text"])
        elif kind == "image_url":
            if not settings.vision:
                raise RequestError(
                    "This model does not accept images (the simulator was started with --no-vision)"
                )
            ref = part.get("image_url")
            url = ref.get("url") if isinstance(ref, dict) else ref
            try:
                images.append(decode_image_url(url))
            except ImageError as exc:
                raise RequestError(f"{where}: {exc}") from None
        else:
            raise RequestError(
                f"{where}: unsupported content part type {kind!r} (supported: text, image_url)"
            )
    return texts, images


def _number(data: dict[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"'{key}' must be a number")
    return float(value)


def _parse_sampling(data: dict[str, Any], req: ChatRequest) -> None:
    n = data.get("n", 1)
    if n not in (None, 1):
        raise RequestError("The simulator supports only n=1")
    max_tokens = data.get("max_completion_tokens", data.get("max_tokens"))
    if max_tokens is not None:
        # 0 is accepted (an empty answer cut at once, finish_reason "length"), as a real server
        # answers it: ChatCompletionRequest has no positive-max_tokens validator (only
        # CompletionRequest does)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise RequestError("max_tokens must be positive")
        req.max_tokens = max_tokens
    min_tokens = data.get("min_tokens", 0) or 0
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) or min_tokens < 0:
        raise RequestError("min_tokens must be a non-negative integer")
    req.min_tokens = min_tokens
    req.ignore_eos = bool(data.get("ignore_eos", False))
    temperature = _number(data, "temperature")
    if temperature is not None and temperature < 0:
        raise RequestError("temperature must be >= 0")
    req.temperature = temperature or 0.0
    top_p = _number(data, "top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise RequestError("top_p must be in (0, 1]")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError("seed must be an integer")
    req.seed = seed


def _parse_tools(data: dict[str, Any], req: ChatRequest) -> None:
    raw_tools = data.get("tools") or []
    if not isinstance(raw_tools, list):
        raise RequestError("'tools' must be a list")
    for i, tool in enumerate(raw_tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise RequestError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise RequestError(f"tools[{i}].function.parameters must be a JSON schema object")
        req.tools.append(
            ToolSpec(name=fn["name"], description=str(fn.get("description") or ""), parameters=params)
        )
    choice = data.get("tool_choice", "auto")
    if choice is None:
        choice = "auto"
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise RequestError("tool_choice must be 'auto', 'none', 'required' or a named function")
    elif isinstance(choice, dict):
        name = (
            (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), dict) else None
        )
        if not name:
            raise RequestError(
                "tool_choice must name a function: {'type': 'function', 'function': {'name': ...}}"
            )
        if name not in {t.name for t in req.tools}:
            raise RequestError(f"Tool '{name}' not found in tools list.")  # serving_chat.py's words
    else:
        raise RequestError("tool_choice must be a string or an object")
    if choice != "none" and choice != "auto" and not req.tools:
        raise RequestError("tool_choice requires tools")
    req.tool_choice = choice
    req.parallel_tool_calls = data.get("parallel_tool_calls", True) is not False


def _parse_thinking(data: dict[str, Any], req: ChatRequest) -> None:
    kwargs = data.get("chat_template_kwargs") or {}
    if isinstance(kwargs, dict):
        for key in ("enable_thinking", "thinking"):
            if key in kwargs and kwargs[key] is not None:
                req.thinking = bool(kwargs[key])
                break
    req.separate_reasoning = data.get("separate_reasoning", True) is not False


def _prompt_key(messages: list[Message]) -> str:
    """The prompt as one string for the prefix cache: roles, texts, and image digests in order."""
    parts = []
    for m in messages:
        marks = "".join(f"<image:{img.digest}>" for img in m.images)
        calls = json.dumps(m.tool_calls) if m.tool_calls else ""
        parts.append(f"<|{m.role}|>{marks}{m.text}{calls}")
    return "\n".join(parts)
