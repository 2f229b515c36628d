"""The HTTP surface: SGLang's routes and wire format, on starlette.

create_app(settings) builds the app; serve it with uvicorn (sim/server.py does).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from deploytool import __version__
from deploytool.sim import serverinfo
from deploytool.sim.answers import AnswerContext, derive_answer
from deploytool.sim.auth import ApiKeyAuth
from deploytool.sim.engine import Engine
from deploytool.sim.faults import FaultState, StreamDropped, adjust_answer, adjust_request, parse_faults
from deploytool.sim.generation import Plan, Unit, build_plan
from deploytool.sim.hostile import Hostile
from deploytool.sim.log import log
from deploytool.sim.metrics import CONTENT_TYPE, render_metrics
from deploytool.sim.oracle import Gsm8kOracle
from deploytool.sim.request import ChatRequest, KVPoolOverflow, RequestError, error_body, parse_chat_request
from deploytool.sim.requestlog import RequestLog, is_drop
from deploytool.sim.running import Generation
from deploytool.sim.settings import SimSettings

VERSION = f"sim-{__version__}"
BANNER = (
    "deploytool.sim {version}: a SIMULATOR of an SGLang server, NOT a model. Replies follow "
    "documented rules (docs/sim.md); timing and capacity are simulated."
)


def _exit_process(code: int) -> None:
    os._exit(code)  # a crash, not a shutdown: no cleanup, like a dying GPU worker


def error_response(
    message: str, status: int, err_type: str, background: BackgroundTask | None = None
) -> JSONResponse:
    return JSONResponse(error_body(message, status, err_type), status_code=status, background=background)


class SimServer:
    def __init__(self, settings: SimSettings, on_crash: Callable[[int], None]) -> None:
        self.faults = FaultState(parse_faults(settings.faults), on_crash)
        if self.faults.config.spec_off:
            # a release that lost its draft model runs without speculative decoding: no
            # speculative_algorithm or avg_spec_accept_length in /server_info, no verify counter
            settings = dataclasses.replace(
                settings, spec_accept_length=0.0, speculative_algorithm=None, speculative_num_steps=None
            )
        self.settings = settings
        self.oracle = (
            Gsm8kOracle.load(settings.gsm8k_path, settings.gsm8k_oracle)
            if settings.gsm8k_oracle is not None
            else None
        )
        self.answer_ctx = AnswerContext(tools_enabled=settings.tools, oracle=self.oracle)
        self.engine = Engine(settings)
        self.created = int(time.time())
        self.startup_time = time.time()
        self.ready_at = time.monotonic() + settings.startup_seconds
        self.health_failing = False  # the health_fail_after fault fired

    # --- lifecycle ------------------------------------------------------------------------------
    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.ready_at = time.monotonic() + self.settings.startup_seconds
        s = self.settings
        log(BANNER.format(version=VERSION))
        log(
            f"model={s.served_model_name!r} context={s.context_length} kv_pool={s.max_total_tokens} "
            f"max_running={s.max_running_requests} decode_tps={s.decode_tps} prefill_tps={s.prefill_tps} "
            f"startup={s.startup_seconds}s faults={self.faults.config.active or 'none'}"
        )
        announce = asyncio.create_task(self._announce_ready())
        try:
            yield
        finally:
            announce.cancel()

    async def _announce_ready(self) -> None:
        if self.faults.config.never_ready:
            log("FAULT never_ready: /health will answer 503 forever")
            return
        await asyncio.sleep(max(0.0, self.ready_at - time.monotonic()))
        log("simulated start-up finished: /health now answers 200")
        await self._late_faults()

    async def _late_faults(self) -> None:
        """health_fail_after and exit_after fire this long after start-up (watch's faults)."""
        config = self.faults.config
        if config.health_fail_after is not None:
            await asyncio.sleep(config.health_fail_after)
            self.health_failing = True
            log(
                f"FAULT health_fail_after={config.health_fail_after}: /health now answers 503; the process runs on"
            )
        if config.exit_after is not None:
            await asyncio.sleep(config.exit_after)
            self.faults.crash(f"exit_after={config.exit_after}")

    def ready(self) -> bool:
        return not self.faults.config.never_ready and time.monotonic() >= self.ready_at

    # --- plain endpoints --------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        if self.health_failing:  # SGLang's answer once its health request times out: 503, no body
            return Response(status_code=503)  # (sglang/srt/entrypoints/http_server.py, health_generate)
        # SGLang answers 503 with an empty body while starting (http_server.py `health_generate`)
        return Response(status_code=200 if self.ready() else 503)

    def _model_card(self) -> dict[str, Any]:
        s = self.settings
        return {
            "id": s.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "sglang",
            "root": s.served_model_name,
            "parent": None,
            "max_model_len": s.context_length,
        }

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_card()]})

    async def model(self, request: Request) -> Response:
        name = request.path_params["model"]
        if name != self.settings.served_model_name:
            return error_response(f"The model '{name}' does not exist.", 404, "NotFoundError")
        return JSONResponse(self._model_card())

    async def server_info(self, request: Request) -> Response:
        return JSONResponse(serverinfo.server_info(self.settings, self.engine, VERSION, self.startup_time))

    async def model_info(self, request: Request) -> Response:
        return JSONResponse(serverinfo.model_info(self.settings))

    async def health_generate(self, request: Request) -> Response:
        # SGLang's /health_generate runs a generation, so a hung scheduler hangs it too
        if self.faults.config.hang and self.ready():
            return _hang_response("GET /health_generate")
        return await self.health(request)

    async def metrics(self, request: Request) -> Response:
        if not self.settings.enable_metrics:  # SGLang mounts /metrics only with --enable-metrics
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return Response(render_metrics(self.engine), media_type=CONTENT_TYPE)

    async def flush_cache(self, request: Request) -> Response:
        self.engine.cache.clear()
        return Response("Cache flushed.\n", status_code=200)

    # --- chat ------------------------------------------------------------------------------------
    async def chat(self, request: Request) -> Response:
        started = time.monotonic()
        done = BackgroundTask(self._chat_done)
        if self.faults.chat_arrived():
            every = self.faults.config.http_500_every
            return error_response(
                f"Simulated internal server error (fault http_500_every={every}).",
                500,
                "InternalServerError",
                done,
            )
        if not self.ready():
            return error_response(
                "The server is not ready yet (simulated start-up).", 503, "ServiceUnavailableError", done
            )
        if self.faults.config.hang:
            return _hang_response("chat request")
        body = await request.body()
        try:
            # parsing a 1 MB prompt or measuring images takes a while: keep the event loop free
            req, plan = await asyncio.to_thread(self._prepare, body)
        except KVPoolOverflow as exc:
            request.state.sim_note = exc.message[:120]
            if exc.stream:  # the scheduler aborts it after the stream began: 200, an error event, [DONE]
                return StreamingResponse(
                    _overflow_events(exc), media_type="text/event-stream", background=done
                )
            return error_response(exc.message, exc.status, exc.err_type, done)
        except RequestError as exc:
            request.state.sim_note = exc.message[:120]
            return error_response(exc.message, exc.status, exc.err_type, done)
        gen = Generation(self.engine, req, plan, started)
        request.state.sim_tokens = (req.prompt_tokens, plan.completion_tokens)
        if req.stream:
            return StreamingResponse(
                self._sse(gen), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )
        # Same schedule as a stream: the reply is ready when the last token would be. A client
        # that goes away meanwhile aborts the request, as SGLang does (tokenizer_manager.py
        # `_wait_one_response`: "Request is disconnected from the client side ... Abort request",
        # checked every SGLANG_REQUEST_STATE_WAIT_TIMEOUT = 4 s there; at once here).
        if not await _unless_disconnected(_drain(gen), request):
            log("client disconnected: request aborted")
            return Response(status_code=499)
        # ChatMessage drops tool_calls when None; with tool calls the content is "" (the parser
        # keeps no normal text), as in sglang's non-streamed path (serving_chat.py).
        message: dict[str, Any] = {
            "role": "assistant",
            # "" rather than null when nothing is left after the
            # reasoning (or max_tokens 0), as a real server answers
            "content": "" if plan.tool_calls else (plan.text_of("content") or ""),
            "reasoning_content": plan.text_of("reasoning"),
        }
        if plan.tool_calls:
            message["tool_calls"] = plan.tool_calls
        return JSONResponse(
            {
                "id": uuid.uuid4().hex,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.settings.served_model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": plan.finish_reason,
                        "matched_stop": None,
                    }
                ],
                "usage": gen.usage(),
                "metadata": {"weight_version": self.settings.weight_version},
            },
            background=done,
        )

    def _prepare(self, body: bytes) -> tuple[ChatRequest, Plan]:
        req = parse_chat_request(body, self.settings)
        adjust_request(self.faults.config, req)
        answer = adjust_answer(
            self.faults.config, derive_answer(req, self.answer_ctx), req, len(self.engine.running)
        )
        return req, build_plan(answer, req, self.settings, self.faults)

    async def _chat_done(self) -> None:
        if self.faults.chat_finished():
            # give the transport a moment to flush the last response, then die mid-flight
            n = self.faults.config.crash_after
            asyncio.get_running_loop().call_later(0.05, self.faults.crash, f"crash_after={n}")

    async def _sse(self, gen: Generation) -> AsyncIterator[str]:
        events = self._events(gen)
        drop_after = self.faults.drop_after()
        sent = 0
        try:
            async for event in events:
                if drop_after is not None and sent >= drop_after:
                    log(f"FAULT drop_stream={drop_after}: closing the connection after {sent} chunks")
                    raise StreamDropped(f"drop_stream={drop_after}")
                yield event
                sent += 1
        finally:
            await events.aclose()
            await self._chat_done()

    async def _events(self, gen: Generation) -> AsyncGenerator[str, None]:
        rid, created, model = uuid.uuid4().hex, int(time.time()), self.settings.served_model_name

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            # Text deltas go through sglang's msgspec encoder (entrypoints/openai/sse_utils.py):
            # reasoning_content always present (null when empty), role/content only when set, no
            # usage key. Tool-call and finish chunks are pydantic ChatCompletionStreamResponse dumps:
            # every DeltaMessage field (tool_calls dropped when None) and "usage": null.
            if "tool_calls" in delta or finish is not None:
                delta = {"role": None, "content": None, "reasoning_content": None, **delta}
                body = {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "delta": delta,
                            "logprobs": None,
                            "finish_reason": finish,
                            "matched_stop": None,
                        }
                    ],
                    "usage": None,
                }
            else:
                delta = {"reasoning_content": None, **delta}
                body = {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "delta": delta,
                            "logprobs": None,
                            "finish_reason": None,
                            "matched_stop": None,
                        }
                    ],
                }
            return f"data: {json.dumps(body)}\n\n"

        first = True
        async for unit in gen.units():
            if first:  # SGLang sends the role with the first generated token, i.e. after prefill
                yield chunk({"role": "assistant", "content": ""})
                first = False
            if unit.kind != "hidden":  # a token the parser swallows (</think>) sends no delta
                yield chunk(_delta(unit))
        if first:
            yield chunk({"role": "assistant", "content": ""})
        yield chunk({}, gen.plan.finish_reason)
        if gen.req.include_usage:
            body = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": gen.usage(),
            }
            yield f"data: {json.dumps(body)}\n\n"
        yield "data: [DONE]\n\n"


def _hang_response(what: str) -> Response:
    """The hang fault: status and headers go out, then no byte ever (until the client gives up)."""
    log(f"FAULT hang: {what} gets its headers and then nothing")

    async def nothing() -> AsyncIterator[str]:
        await asyncio.Event().wait()
        yield ""  # never reached

    return StreamingResponse(nothing(), media_type="text/event-stream")


async def _overflow_events(exc: KVPoolOverflow) -> AsyncIterator[str]:
    """serving_chat.py: an abort with a status code becomes create_streaming_error_response
    ({"error": ErrorResponse}, type = the HTTPStatus name), then [DONE]."""
    body = {
        "error": {
            "object": "error",
            "message": exc.message,
            "type": "BAD_REQUEST",
            "param": None,
            "code": 400,
        }
    }
    yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"


async def _drain(gen: Generation) -> None:
    async for _ in gen.units():
        pass


async def _unless_disconnected(work: Any, request: Request) -> bool:
    """Run `work`; cancel it if the client disconnects first (its slot is freed and the request
    counted as aborted). True when the work finished. Streams need no watcher: starlette stops a
    StreamingResponse whose client went away, which closes the generator the same way."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while True:  # the body was read already, so the next message is http.disconnect
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()
    return True


def _delta(unit: Unit) -> dict[str, Any]:
    if unit.kind == "reasoning":
        return {"reasoning_content": unit.text}
    if unit.kind == "content":
        return {"content": unit.text}
    if unit.kind == "tool_start":
        return {
            "tool_calls": [
                {
                    "index": unit.index,
                    "id": unit.call_id,
                    "type": "function",
                    "function": {"name": unit.text, "arguments": ""},
                }
            ]
        }
    return {
        "tool_calls": [
            {
                "id": None,
                "index": unit.index,
                "type": "function",
                "function": {"name": None, "arguments": unit.text},
            }
        ]
    }


async def _http_error(request: Request, exc: Exception) -> Response:
    """An unknown route or a wrong method: FastAPI's own body, {"detail": "Not Found"}, as a
    real SGLang server answers (tests/data/sglang-real/dense/error_unknown_route.json)."""
    assert isinstance(exc, HTTPException)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)


async def _internal_error(request: Request, exc: Exception) -> Response:
    if not is_drop(exc):  # a dropped stream is the drop_stream fault, already logged
        log(f"internal error on {request.url.path}: {type(exc).__name__}: {exc}")
    return error_response(
        f"Internal error in the simulator: {type(exc).__name__}: {exc}", 500, "InternalServerError"
    )


def create_app(
    settings: SimSettings | None = None, on_crash: Callable[[int], None] | None = None
) -> Starlette:
    """The starlette app. ``on_crash(status)`` ends the server on crash faults (default: os._exit)."""
    settings = settings or SimSettings()
    sim = SimServer(settings, on_crash or _exit_process)
    routes = [
        Route("/health", sim.health, methods=["GET"]),
        Route("/health_generate", sim.health_generate, methods=["GET"]),
        Route("/v1/models", sim.models, methods=["GET"]),
        Route("/v1/models/{model:path}", sim.model, methods=["GET"]),
        Route("/get_server_info", sim.server_info, methods=["GET"]),
        Route("/server_info", sim.server_info, methods=["GET"]),
        Route("/get_model_info", sim.model_info, methods=["GET"]),
        Route("/model_info", sim.model_info, methods=["GET"]),
        Route("/metrics", sim.metrics, methods=["GET"]),
        Route("/flush_cache", sim.flush_cache, methods=["POST", "GET"]),
        Route("/v1/chat/completions", sim.chat, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=sim.lifespan,
        # The request log sees refused calls too (SGLang logs them as 401s).
        middleware=[
            Middleware(RequestLog, enabled=settings.log_requests),
            Middleware(ApiKeyAuth, api_key=settings.api_key),
            Middleware(Hostile, config=sim.faults.config),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    app.state.sim = sim
    return app
