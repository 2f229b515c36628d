"""Injected faults: the ways a real deployment breaks, on demand, so callers can prove they notice.

Configured with ``DEPLOYTOOL_SIM_FAULT=a,b=N`` and/or ``--fault a --fault b=N``.
Each fault logs its effect to stderr when it fires.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from deploytool.sim.log import log

# name -> True when the fault takes a positive integer "=N"
FAULTS: dict[str, bool] = {
    # Faults a supervisor must see (deploytool watch): the process runs on, or dies later.
    "health_fail_after": True,
    "exit_after": True,
    "crash_on_start": False,
    "never_ready": False,
    "crash_after": True,
    "bad_tool_json": False,
    "drop_stream": True,
    "http_500_every": True,
    # Faults that only a check of the answers can see (qualify's verdicts):
    "hang": False,
    "corrupt_under_load": True,
    "needle_lost_after": True,
    "drop_arg_tail": True,
    "ignore_tool_choice": False,
    "spec_off": False,
    # Hostile modes (sim/hostile.py): a server that attacks the client judging it.
    "script_text": False,
    "huge_body": False,
    "trickle": False,
    "deep_json": False,
    "endless_sse": False,
    "terminal_escapes": False,
    "rich_markup": False,
    "lone_surrogates": False,
    "infinity": False,
    "huge_log_line": False,
    "print_server_args": False,
    "hostile_health": False,
}

FAULT_HELP = (
    "Inject a fault (repeatable; env DEPLOYTOOL_SIM_FAULT takes a comma-separated list): "
    "health_fail_after=N (/health answers 503 from N seconds after start-up while the process and chat "
    "keep running: a wedged scheduler); exit_after=N (exit status 3 N seconds after start-up); "
    "crash_on_start (exit status 3 at once); never_ready (/health stays 503); "
    "crash_after=N (exit status 3 after N chat requests); bad_tool_json (tool-call arguments "
    "become invalid JSON or wrong types); drop_stream=N (streams are cut after N chunks, no [DONE]); "
    "http_500_every=N (every Nth chat request gets HTTP 500); hang (chat requests and /health_generate "
    "send their headers, then nothing); corrupt_under_load=N (numbers in answers are off by one while N or "
    "more other requests run); needle_lost_after=N (prompts over N tokens lose their needles); "
    "drop_arg_tail=N (tool-call string arguments longer than N characters are cut to N); "
    "ignore_tool_choice (tool_choice is treated as auto); spec_off (server info reports speculative "
    "decoding off, as a release that lost its draft model would). Hostile modes (every route but the health "
    "ones, which hostile_health adds): script_text (a script in every JSON text value), huge_body (a 1 GiB "
    "body, streamed), trickle (the body one byte every 0.25 s), deep_json (JSON nested 100,000 deep), "
    "endless_sse (a streamed chat that never ends), terminal_escapes (terminal control sequences in every "
    "JSON text value: a clipboard write, a window title, cursor moves that erase lines), rich_markup (rich "
    "markup in every JSON text value: a link, a stray closing tag), lone_surrogates (lone surrogate escapes "
    "in every JSON text value, which surrogateescape writes as the bytes of U+202E and U+009B), infinity "
    "(max_model_len and every other "
    "length is the number Infinity, which JSON does not have). In its log at start-up: huge_log_line (one "
    "line of 32 MiB), print_server_args (its settings, API key included, as SGLang logs its server_args); "
    "terminal_escapes writes its sequences there too."
)

CRASH_EXIT_CODE = 3


@dataclass(frozen=True)
class FaultConfig:
    health_fail_after: int | None = None
    exit_after: int | None = None
    crash_on_start: bool = False
    never_ready: bool = False
    crash_after: int | None = None
    bad_tool_json: bool = False
    drop_stream: int | None = None
    http_500_every: int | None = None
    hang: bool = False
    corrupt_under_load: int | None = None
    needle_lost_after: int | None = None
    drop_arg_tail: int | None = None
    ignore_tool_choice: bool = False
    spec_off: bool = False
    script_text: bool = False
    huge_body: bool = False
    trickle: bool = False
    deep_json: bool = False
    endless_sse: bool = False
    terminal_escapes: bool = False
    rich_markup: bool = False
    lone_surrogates: bool = False
    infinity: bool = False
    huge_log_line: bool = False
    print_server_args: bool = False
    hostile_health: bool = False

    @property
    def active(self) -> list[str]:
        out = []
        for name, takes_n in FAULTS.items():
            value = getattr(self, name)
            if takes_n and value is not None:
                out.append(f"{name}={value}")
            elif not takes_n and value:
                out.append(name)
        return out


def parse_faults(specs: Iterable[str]) -> FaultConfig:
    """Parse fault specs like ``crash_after=3``; raises ValueError naming the bad one."""
    values: dict[str, Any] = {}
    for spec in specs:
        for part in str(spec).split(","):
            part = part.strip()
            if not part:
                continue
            name, _, arg = part.partition("=")
            name = name.strip().lower().replace("-", "_")
            if name not in FAULTS:
                raise ValueError(f"unknown fault {part!r}; known: {', '.join(FAULTS)}")
            if FAULTS[name]:
                try:
                    n = int(arg)
                except ValueError:
                    raise ValueError(f"fault {name} needs a positive integer: {name}=N") from None
                if n < 1:
                    raise ValueError(f"fault {name} needs a positive integer: {name}=N")
                values[name] = n
            else:
                if arg:
                    raise ValueError(f"fault {name} takes no value")
                values[name] = True
    return FaultConfig(**values)


class StreamDropped(Exception):
    """Raised inside a streaming body to make the server close the connection mid-stream."""


class FaultState:
    """Counters behind the counting faults; thread-safe because tests share one server."""

    def __init__(self, config: FaultConfig, on_crash: Callable[[int], None]) -> None:
        self.config = config
        self._on_crash = on_crash
        self._lock = threading.Lock()
        self._chat_arrivals = 0
        self._chat_done = 0
        self._tool_calls = 0
        self.crashed = False

    def chat_arrived(self) -> bool:
        """Count a chat request; True when http_500_every says this one must fail."""
        with self._lock:
            self._chat_arrivals += 1
            n = self._chat_arrivals
        every = self.config.http_500_every
        if every and n % every == 0:
            log(f"FAULT http_500_every={every}: chat request #{n} answered with HTTP 500")
            return True
        return False

    def chat_finished(self) -> bool:
        """Count a served chat request; True when crash_after says the process must now die."""
        with self._lock:
            self._chat_done += 1
            n = self._chat_done
        limit = self.config.crash_after
        return bool(limit and n >= limit and not self.crashed)

    def crash(self, reason: str) -> None:
        with self._lock:
            if self.crashed:
                return
            self.crashed = True
        log(f"FAULT {reason}: exiting with status {CRASH_EXIT_CODE}")
        self._on_crash(CRASH_EXIT_CODE)

    def drop_after(self) -> int | None:
        return self.config.drop_stream

    def corrupt_arguments(self, arguments: str) -> str:
        """bad_tool_json: odd-numbered calls get invalid JSON, even-numbered ones wrong types."""
        with self._lock:
            self._tool_calls += 1
            n = self._tool_calls
        if n % 2 == 1:
            # Python-repr style quoting and a missing closing brace: what a sloppy model emits
            broken = arguments.replace('"', "'")
            broken = broken[:-1] if broken.endswith("}") else broken + "{"
            log(f"FAULT bad_tool_json: tool call #{n} arguments made invalid JSON")
            return broken
        log(f"FAULT bad_tool_json: tool call #{n} arguments given wrong types")
        return json.dumps(_wrong_types(json.loads(arguments)))


def _wrong_types(args: Any) -> Any:
    """Every value swapped for one of another JSON type; an empty object gains an unknown key."""
    if not isinstance(args, dict) or not args:
        return {"unexpected_parameter": 1}
    swap = {
        str: 12345,
        int: "not a number",
        float: "not a number",
        bool: "yes",
        list: "item",
        dict: "object",
        type(None): 0,
    }
    return {key: swap.get(type(value)) for key, value in args.items()}


# --- faults on the answer (sim/app.py calls adjust_request before, adjust_answer after the rules) ---

_DIGITS = re.compile(r"\d+")


def adjust_request(config: FaultConfig, req: Any) -> None:
    """ignore_tool_choice: the request's tool_choice is read as 'auto' (a template or parser that
    drops it: 'required' may answer in prose, 'none' may call, a named function may be another)."""
    if config.ignore_tool_choice and getattr(req, "tool_choice", "auto") != "auto":
        log(f"FAULT ignore_tool_choice: tool_choice {req.tool_choice!r} treated as 'auto'")
        req.tool_choice = "auto"


def adjust_answer(config: FaultConfig, answer: Any, req: Any, running: int) -> Any:
    """The answer-level faults, applied to the rule's answer before it becomes tokens."""
    if (
        config.needle_lost_after is not None
        and answer.rule in ("magic-number", "retrieval")
        and req.prompt_tokens > config.needle_lost_after
    ):
        log(
            f"FAULT needle_lost_after={config.needle_lost_after}: a {req.prompt_tokens}-token prompt lost its needle"
        )
        answer.content = "I could not find that in the provided text."
    if (
        config.corrupt_under_load is not None
        and running >= config.corrupt_under_load
        and answer.content
        and not answer.tool_calls
    ):
        log(
            f"FAULT corrupt_under_load={config.corrupt_under_load}: {running} running, numbers in the answer off by one"
        )
        answer.content = _DIGITS.sub(lambda m: _off_by_one(m.group()), answer.content)
    if config.drop_arg_tail is not None:
        for call in answer.tool_calls:
            call.arguments = _cut_long_strings(call.arguments, config.drop_arg_tail)
    return answer


def _off_by_one(digits: str) -> str:
    """The last digit changed, length kept (a 7-digit needle stays 7 digits, just wrong)."""
    return digits[:-1] + str((int(digits[-1]) + 1) % 10)


def _cut_long_strings(arguments: str, limit: int) -> str:
    try:
        args = json.loads(arguments)
    except ValueError:
        return arguments

    def cut(value: Any) -> Any:
        if isinstance(value, str) and len(value) > limit:
            log(f"FAULT drop_arg_tail={limit}: a {len(value)}-character argument cut to {limit}")
            return value[:limit]
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        if isinstance(value, list):
            return [cut(v) for v in value]
        return value

    return json.dumps(cut(args))
