"""Record what a real SGLang server answers, byte for byte, as fixture files (tests/data/sglang-real/):
the info routes, streamed and plain chats with and without tools and reasoning, the error bodies,
the 401 body, and what happens to a request whose client leaves. Stdlib only.

Each fixture is one JSON file: {"request": {...}, "status", "headers", "body"} where body is the
text as received; streamed answers keep the raw SSE text and each network read's arrival time.
The API key never lands in a file: Authorization is written as "Bearer <redacted>" and the key's
value is replaced wherever the server echoes it.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
from pathlib import Path

from server import HOST, PORT, request

REDACTED = "<redacted>"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_stock_price",
            "description": "Latest price of a stock ticker",
            "parameters": {
                "type": "object",
                "properties": {"ticker": {"type": "string"}},
                "required": ["ticker"],
            },
        },
    },
]
USER = [{"role": "user", "content": "What is the weather in Paris today?"}]


class Recorder:
    def __init__(self, out: Path, model: str, api_key: str | None):
        self.out, self.model, self.key = out, model, api_key
        self.out.mkdir(parents=True, exist_ok=True)
        self.index: list[dict] = []

    def _auth(self, auth: bool | str) -> dict:
        if auth is True and self.key:
            return {"Authorization": f"Bearer {self.key}"}
        if isinstance(auth, str):
            return {"Authorization": auth}
        return {}

    def _clean(self, text: str) -> str:
        return text.replace(self.key, REDACTED) if self.key else text

    def _save(self, name: str, record: dict) -> dict:
        hdrs = record["request"].get("headers") or {}
        if "Authorization" in hdrs:
            hdrs["Authorization"] = "Bearer " + (
                REDACTED if self.key and self.key in hdrs["Authorization"] else "wrong-key"
            )
        text = self._clean(json.dumps(record, indent=1, ensure_ascii=False))
        (self.out / f"{name}.json").write_text(text + "\n")
        self.index.append({"name": name, "status": record.get("status"), "path": record["request"]["path"]})
        return record

    def get(self, name: str, path: str, auth: bool | str = True) -> dict:
        headers = self._auth(auth)
        status, hdrs, body, error = request("GET", path, headers=headers, timeout=30)
        return self._save(
            name,
            {
                "request": {"method": "GET", "path": path, "headers": headers},
                "status": status,
                "headers": _keep(hdrs),
                "error": error,
                "body": body.decode("utf-8", "replace"),
            },
        )

    def post(
        self,
        name: str,
        path: str,
        payload: object = None,
        auth: bool | str = True,
        raw: bytes | None = None,
        method: str = "POST",
    ) -> dict:
        headers = self._auth(auth)
        t = time.monotonic()
        status, hdrs, body, error = request(method, path, body=payload, headers=headers, timeout=120, raw=raw)
        return self._save(
            name,
            {
                "request": {
                    "method": method,
                    "path": path,
                    "headers": headers,
                    "body": payload if raw is None else raw.decode("utf-8", "replace"),
                },
                "status": status,
                "headers": _keep(hdrs),
                "error": error,
                "seconds": round(time.monotonic() - t, 3),
                "body": body.decode("utf-8", "replace"),
            },
        )

    def stream(
        self, name: str, payload: dict, auth: bool | str = True, stop_after_events: int | None = None
    ) -> dict:
        """A streamed chat; the raw SSE text and each read's arrival time. With stop_after_events
        the client closes its socket after that many events (it leaves)."""
        headers = {"Content-Type": "application/json", **self._auth(auth)}
        conn = http.client.HTTPConnection(HOST, PORT, timeout=120)
        t0 = time.monotonic()
        reads: list[list] = []
        events = 0
        status = error = None
        hdrs: dict = {}
        try:
            conn.request("POST", "/v1/chat/completions", body=json.dumps(payload).encode(), headers=headers)
            resp = conn.getresponse()
            status, hdrs = resp.status, dict(resp.getheaders())
            while True:
                piece = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
                if not piece:
                    break
                reads.append([round(time.monotonic() - t0, 4), piece.decode("utf-8", "replace")])
                events += piece.count(b"\n\n")
                if stop_after_events is not None and events >= stop_after_events:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                    break
        except (OSError, http.client.HTTPException) as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
        sse = "".join(r[1] for r in reads)
        return self._save(
            name,
            {
                "request": {
                    "method": "POST",
                    "path": "/v1/chat/completions",
                    "headers": headers,
                    "body": payload,
                },
                "status": status,
                "headers": _keep(hdrs),
                "error": error,
                "left_after_events": stop_after_events,
                "reads": reads,
                "body": sse,
            },
        )

    def chat(self, **kw) -> dict:
        return {"model": self.model, "messages": USER, "temperature": 0, **kw}


def _keep(headers: dict) -> dict:
    return {
        k.lower(): v
        for k, v in headers.items()
        if k.lower() in ("content-type", "content-length", "transfer-encoding", "www-authenticate")
    }


def metric_values(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Sum of each named series over its labels (Prometheus text)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)", line)
        if m and m.group(1) in names:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


ABORT_SERIES = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:num_aborted_requests_total",
    "sglang:num_requests_total",
    "sglang:generation_tokens_total",
)


def _metrics(headers: dict) -> dict[str, float]:
    status, _, body, _ = request("GET", "/metrics", headers=headers, timeout=10)
    return metric_values(body.decode("utf-8", "replace"), ABORT_SERIES) if status == 200 else {}


def abort_checks(rec: Recorder) -> dict:
    """A client that leaves: streamed (socket closed after a few events) and not streamed (the
    client's timeout). How long until the server runs nothing, and what the counters say."""
    headers = rec._auth(True)
    results = {}
    long = rec.chat(max_tokens=20000, ignore_eos=True, stream=True)
    before = _metrics(headers)
    t = time.monotonic()
    rec.stream("abort_stream_client_leaves", long, stop_after_events=4)
    results["stream"] = _until_idle(headers, before, t, 20)
    plain = rec.chat(max_tokens=20000, ignore_eos=True)
    before = _metrics(headers)
    t = time.monotonic()
    holder: dict = {}

    def send():
        conn = http.client.HTTPConnection(HOST, PORT, timeout=2.0)
        try:
            conn.request(
                "POST",
                "/v1/chat/completions",
                body=json.dumps(plain).encode(),
                headers={"Content-Type": "application/json", **headers},
            )
            conn.getresponse().read()
            holder["finished"] = True
        except (OSError, http.client.HTTPException) as exc:
            holder["client_error"] = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()

    th = threading.Thread(target=send)
    th.start()
    th.join()
    results["plain"] = {**_until_idle(headers, before, t, 25), **holder}
    return results


def _until_idle(headers: dict, before: dict, t0: float, limit: float) -> dict:
    seen_running = False
    while time.monotonic() - t0 < limit:
        now = _metrics(headers)
        running = now.get("sglang:num_running_reqs", 0) + now.get("sglang:num_queue_reqs", 0)
        seen_running = seen_running or running > 0
        if running == 0 and time.monotonic() - t0 > 0.5:
            return {
                "idle_after_s": round(time.monotonic() - t0, 2),
                "before": before,
                "after": now,
                "deltas": {k: now.get(k, 0) - before.get(k, 0) for k in ABORT_SERIES},
            }
        time.sleep(0.2)
    return {
        "idle_after_s": None,
        "still_running_after_s": limit,
        "before": before,
        "after": _metrics(headers),
    }


def record_all(rec: Recorder, context_length: int, tools: bool = True, thinking: bool = True) -> dict:
    """The whole set for one server (the api key, when the server has one, on every request but
    the 401 probes)."""
    for name, path in (
        ("server_info", "/server_info"),
        ("get_server_info", "/get_server_info"),
        ("model_info", "/model_info"),
        ("get_model_info", "/get_model_info"),
        ("v1_models", "/v1/models"),
        ("health", "/health"),
        ("health_generate", "/health_generate"),
    ):
        rec.get(name, path)
    rec.post("chat_plain", "/v1/chat/completions", rec.chat(max_tokens=16))
    rec.stream("chat_stream", rec.chat(max_tokens=16, stream=True, stream_options={"include_usage": True}))
    if thinking:
        on = {"chat_template_kwargs": {"enable_thinking": True}}
        rec.post("chat_thinking_plain", "/v1/chat/completions", rec.chat(max_tokens=24, **on))
        rec.stream(
            "chat_thinking_stream",
            rec.chat(max_tokens=24, stream=True, stream_options={"include_usage": True}, **on),
        )
        rec.stream("chat_thinking_default_stream", {**rec.chat(max_tokens=12, stream=True), "messages": USER})
    if tools:
        rec.stream(
            "chat_tools_auto_stream",
            rec.chat(max_tokens=24, stream=True, tools=TOOLS, stream_options={"include_usage": True}),
        )
        rec.post(
            "chat_tools_required_plain",
            "/v1/chat/completions",
            rec.chat(max_tokens=96, tools=TOOLS, tool_choice="required"),
        )
        rec.stream(
            "chat_tools_required_stream",
            rec.chat(
                max_tokens=96,
                stream=True,
                tools=TOOLS,
                tool_choice="required",
                stream_options={"include_usage": True},
            ),
        )
        named = {"type": "function", "function": {"name": "get_stock_price"}}
        rec.stream(
            "chat_tools_named_stream", rec.chat(max_tokens=96, stream=True, tools=TOOLS, tool_choice=named)
        )
        if thinking:
            rec.stream(
                "chat_tools_thinking_stream",
                rec.chat(
                    max_tokens=48, stream=True, tools=TOOLS, chat_template_kwargs={"enable_thinking": True}
                ),
            )
        rec.post(
            "error_tool_choice_absent",
            "/v1/chat/completions",
            rec.chat(
                max_tokens=8, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}
            ),
        )
    # error bodies
    long_text = "lorem " * int(context_length * 1.2)
    over = rec.chat(max_tokens=8, messages=[{"role": "user", "content": long_text}])
    rec.post("error_context_overflow_plain", "/v1/chat/completions", over)
    rec.stream("error_context_overflow_stream", {**over, "stream": True})
    rec.post("error_max_tokens_overflow", "/v1/chat/completions", rec.chat(max_tokens=context_length * 2))
    rec.post("error_max_tokens_zero", "/v1/chat/completions", rec.chat(max_tokens=0))
    rec.post("error_temperature_negative", "/v1/chat/completions", rec.chat(max_tokens=4, temperature=-1))
    rec.post("error_top_p", "/v1/chat/completions", rec.chat(max_tokens=4, top_p=2.0))
    rec.post("error_n_2", "/v1/chat/completions", rec.chat(max_tokens=4, n=2))
    rec.post("error_no_messages", "/v1/chat/completions", {"model": rec.model, "max_tokens": 4})
    rec.post(
        "error_bad_role",
        "/v1/chat/completions",
        rec.chat(max_tokens=4, messages=[{"role": "wizard", "content": "hi"}]),
    )
    rec.post("error_malformed_json", "/v1/chat/completions", raw=b'{"model": "x", "messages": [')
    rec.post(
        "error_image_to_text_model",
        "/v1/chat/completions",
        rec.chat(
            max_tokens=4,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}},
                    ],
                }
            ],
        ),
    )
    rec.get("error_unknown_route", "/v1/nothing-here")
    rec.post("error_wrong_method", "/v1/models", {})
    if rec.key:
        rec.get("auth_models_no_key", "/v1/models", auth=False)
        rec.post("auth_chat_no_key", "/v1/chat/completions", rec.chat(max_tokens=4), auth=False)
        rec.post(
            "auth_chat_wrong_key", "/v1/chat/completions", rec.chat(max_tokens=4), auth="Bearer wrong-key"
        )
        rec.get("auth_server_info_no_key", "/server_info", auth=False)
        rec.get("auth_health_no_key", "/health", auth=False)
        rec.get("auth_metrics_no_key", "/metrics", auth=False)
    return {"recorded": len(rec.index), "index": rec.index}
