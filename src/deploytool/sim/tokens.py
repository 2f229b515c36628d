"""The token-count rule. There is no tokenizer: a token is a word or one punctuation character.

    tokens(text) = number of matches of  \\w+|[^\\w\\s]  in text

A prompt costs, per message, MESSAGE_OVERHEAD tokens plus the tokens of its text
(and of any tool calls it carries) plus IMAGE_TOKENS per image; the JSON of the
request's ``tools`` list is counted once on top. Output is emitted one token per
fragment, and a fragment is a token with the whitespace before it, so the
fragments of a text concatenate back to it exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_FRAGMENT_RE = re.compile(r"\s*(?:\w+|[^\w\s])")

MESSAGE_OVERHEAD = 4  # role markers a chat template adds around each message
IMAGE_TOKENS = 256  # message_tokens' flat per-image rate; chat requests count images by size (deploytool/image_tokens.py)


def count_tokens(text: str) -> int:
    """Tokens in ``text`` under the sim's rule. findall runs in C: fine for 1 MB prompts."""
    if not text:
        return 0
    return len(TOKEN_RE.findall(text))


def fragments(text: str) -> list[str]:
    """Split text into one fragment per token; ''.join(fragments(t)) == t (bar pure whitespace)."""
    parts = _FRAGMENT_RE.findall(text)
    if not parts:
        return []
    tail = text[sum(map(len, parts)) :]  # trailing whitespace has no token of its own
    if tail:
        parts[-1] += tail
    return parts


def message_tokens(text: str, images: int = 0, tool_calls: Iterable[Any] = ()) -> int:
    calls = list(tool_calls)
    extra = count_tokens(json.dumps(calls)) if calls else 0
    return MESSAGE_OVERHEAD + count_tokens(text) + IMAGE_TOKENS * images + extra


def tools_tokens(tools: list[dict[str, Any]] | None) -> int:
    return count_tokens(json.dumps(tools)) if tools else 0
