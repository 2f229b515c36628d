"""A loopback OpenAI-compatible chat server that streams tokens as fast as it can.

The yardstick for benchmarks/client_overhead.py: a server far cheaper per token than any client,
so the measured ceiling is the client's. Every chunk is rendered once at start; a stream is
written in batches of chunks, so the server spends almost nothing per token while the client
still parses one SSE event per token, as it does against SGLang.

    python benchmarks/stream_server.py --port 18123
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

MODEL = "firehose"
BATCH = 32  # chunks per write


def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chunk(delta: dict, finish: str | None = None, cid: str = "chatcmpl-firehose") -> dict:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


ROLE = _event(_chunk({"role": "assistant", "content": ""}))
TOKEN = _event(_chunk({"content": " tok"}))  # one token per event, like SGLang's default stream
FINISH = _event(_chunk({}, "length"))
DONE = b"data: [DONE]\n\n"


async def chat(request: Request):
    body = await request.json()
    n = int(body.get("max_completion_tokens") or body.get("max_tokens") or 1000)
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": n,
        "total_tokens": prompt_tokens + n,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    if not body.get("stream"):
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": MODEL,
                "usage": usage,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "length",
                        "message": {"role": "assistant", "content": " tok" * n},
                    }
                ],
            }
        )
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    async def events():
        yield ROLE
        full, rest = divmod(n, BATCH)
        batch = TOKEN * BATCH
        for _ in range(full):
            yield batch
        if rest:
            yield TOKEN * rest
        yield FINISH
        if include_usage:
            yield _event(
                {
                    "id": "chatcmpl-firehose",
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": MODEL,
                    "choices": [],
                    "usage": usage,
                }
            )
        yield DONE

    return StreamingResponse(events(), media_type="text/event-stream")


async def models(request: Request):
    return JSONResponse(
        {
            "object": "list",
            "data": [{"id": MODEL, "object": "model", "owned_by": "bench", "max_model_len": 1_000_000}],
        }
    )


async def health(request: Request):
    return JSONResponse({})


app = Starlette(
    routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models),
        Route("/health", health),
        Route("/health_generate", health),
    ]
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18123)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
