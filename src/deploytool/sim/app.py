"""The HTTP surface: SGLang's routes and wire format, on starlette.

create_app(settings) builds the app; serve it with uvicorn (sim/server.py does).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deploytool import __version__
from deploytool.sim.answers import AnswerContext, derive_answer
from deploytool.sim.engine import Engine
from deploytool.sim.faults import FaultState, StreamDropped, parse_faults
from deploytool.sim.generation import Plan, Unit, build_plan
from deploytool.sim.log import log
from deploytool.sim.metrics import CONTENT_TYPE, render_metrics
from deploytool.sim.oracle import Gsm8kOracle
from deploytool.sim.request import ChatRequest, RequestError, error_body, parse_chat_request
from deploytool.sim.settings import SimSettings

VERSION = f"sim-{__version__}"
BANNER = ("deploytool.sim {version}: a SIMULATOR of an SGLang server, NOT a model. Replies follow "
          "documented rules (docs/sim.md); timing and capacity are simulated.")


def _exit_process(code: int) -> None:
    os._exit(code)  # a crash, not a shutdown: no cleanup, like a dying GPU worker


def error_response(message: str, status: int, err_type: str, background: BackgroundTask | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, status, err_type), status_code=status, background=background)


class Generation:
    """One admitted request's run through the engine: queue, prefill, paced tokens, accounting."""

    def __init__(self, engine: Engine, req: ChatRequest, plan: Plan, started: float) -> None:
        self.engine, self.req, self.plan, self.started = engine, req, plan, started
        self.cached_tokens = 0

    async def units(self) -> AsyncIterator[Unit]:
        engine = self.engine
        slot = await engine.admit(self.req.prompt_tokens)
        complete = False
        try:
            self.cached_tokens, prefill_s = engine.prefill(self.req.prompt_key, self.req.prompt_tokens)
            async for unit in engine.pace(slot, self.plan.units, prefill_s, self.started):
                yield unit
            complete = True
        finally:
            engine.release(slot)
            stats = engine.stats
            stats.prompt_tokens += self.req.prompt_tokens
            stats.cached_tokens += self.cached_tokens
            stats.requests += 1
            stats.aborted += 0 if complete else 1
            stats.e2e.observe(time.monotonic() - self.started)

    def usage(self) -> dict[str, Any]:
        completion = self.plan.completion_tokens
        return {
            "prompt_tokens": self.req.prompt_tokens,
            "total_tokens": self.req.prompt_tokens + completion,
            "completion_tokens": completion,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            "reasoning_tokens": self.plan.reasoning_tokens,
        }


class SimServer:
    def __init__(self, settings: SimSettings, on_crash: Callable[[int], None]) -> None:
        self.settings = settings
        self.faults = FaultState(parse_faults(settings.faults), on_crash)
        self.oracle = (Gsm8kOracle.load(settings.gsm8k_path, settings.gsm8k_oracle)
                       if settings.gsm8k_oracle is not None else None)
        self.answer_ctx = AnswerContext(tools_enabled=settings.tools, oracle=self.oracle)
        self.engine = Engine(settings)
        self.created = int(time.time())
        self.ready_at = time.monotonic() + settings.startup_seconds
        self.health_failing = False  # the health_fail_after fault fired

    # --- lifecycle ------------------------------------------------------------------------------
    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.ready_at = time.monotonic() + self.settings.startup_seconds
        s = self.settings
        log(BANNER.format(version=VERSION))
        log(f"model={s.served_model_name!r} context={s.context_length} kv_pool={s.max_total_tokens} "
            f"max_running={s.max_running_requests} decode_tps={s.decode_tps} prefill_tps={s.prefill_tps} "
            f"startup={s.startup_seconds}s faults={self.faults.config.active or 'none'}")
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
            log(f"FAULT health_fail_after={config.health_fail_after}: /health now answers 503; the process runs on")
        if config.exit_after is not None:
            await asyncio.sleep(config.exit_after)
            self.faults.crash(f"exit_after={config.exit_after}")

    def ready(self) -> bool:
        return not self.faults.config.never_ready and time.monotonic() >= self.ready_at

    # --- plain endpoints --------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        if self.health_failing:  # SGLang's answer once its health request times out: 503, no body
            return Response(status_code=503)  # (sglang/srt/entrypoints/http_server.py, health_generate)
        if self.ready():
            return Response(status_code=200)
        return Response("starting" if not self.faults.config.never_ready else "not ready", status_code=503)

    def _model_card(self) -> dict[str, Any]:
        s = self.settings
        return {"id": s.served_model_name, "object": "model", "created": self.created, "owned_by": "sglang",
                "root": s.served_model_name, "parent": None, "max_model_len": s.context_length}

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [self._model_card()]})

    async def model(self, request: Request) -> Response:
        name = request.path_params["model"]
        if name != self.settings.served_model_name:
            return error_response(f"The model '{name}' does not exist.", 404, "NotFoundError")
        return JSONResponse(self._model_card())

    async def server_info(self, request: Request) -> Response:
        s, engine = self.settings, self.engine
        return JSONResponse({
            "model_path": s.model_path,
            "tokenizer_path": s.model_path,
            "served_model_name": s.served_model_name,
            "host": s.host,
            "port": s.port,
            "context_length": s.context_length,
            "max_total_num_tokens": s.max_total_tokens,
            "max_running_requests": s.max_running_requests,
            "max_req_input_len": min(s.context_length, s.max_total_tokens) - 1,
            "chunked_prefill_size": s.chunked_prefill_size,
            "page_size": 1,
            "tp_size": s.tp_size,
            "dp_size": 1,
            "speculative_algorithm": s.reported_speculative_algorithm,
            "speculative_num_steps": s.reported_speculative_num_steps,
            # what the simulated Qwen3-style deployment is configured with
            "reasoning_parser": None if s.no_reasoning_field else "qwen3",
            "tool_call_parser": "qwen25" if s.tools else None,
            "enable_cache_report": True,
            "version": VERSION,
            "simulator": True,
            "internal_states": [{
                "avg_spec_accept_length": s.spec_accept_length,
                "last_gen_throughput": engine.stats.gen_throughput(),
                "num_running_reqs": len(engine.running),
                "num_queue_reqs": engine.queued,
                "token_usage": engine.token_usage(),
            }],
            "sim_settings": s.as_dict(),
        })

    async def model_info(self, request: Request) -> Response:
        s = self.settings
        return JSONResponse({
            "model_path": s.model_path, "tokenizer_path": s.model_path, "is_generation": True,
            "preferred_sampling_params": None, "weight_version": "default",
            "has_image_understanding": s.vision, "model_type": "simulator",
        })

    async def metrics(self, request: Request) -> Response:
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
            return error_response(f"Simulated internal server error (fault http_500_every={every}).",
                                  500, "InternalServerError", done)
        if not self.ready():
            return error_response("The server is not ready yet (simulated start-up).", 503,
                                  "ServiceUnavailableError", done)
        body = await request.body()
        try:
            # parsing a 1 MB prompt or measuring images takes a while: keep the event loop free
            req, plan = await asyncio.to_thread(self._prepare, body)
        except RequestError as exc:
            request.state.sim_note = exc.message[:120]
            return error_response(exc.message, exc.status, exc.err_type, done)
        gen = Generation(self.engine, req, plan, started)
        request.state.sim_tokens = (req.prompt_tokens, plan.completion_tokens)
        if req.stream:
            return StreamingResponse(self._sse(gen), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        async for _ in gen.units():
            pass  # same schedule as a stream: the reply is ready when the last token would be
        message = {"role": "assistant", "content": plan.text_of("content"),
                   "reasoning_content": plan.text_of("reasoning"), "tool_calls": plan.tool_calls or None}
        return JSONResponse({
            "id": uuid.uuid4().hex,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.settings.served_model_name,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": plan.finish_reason, "matched_stop": None}],
            "usage": gen.usage(),
        }, background=done)

    def _prepare(self, body: bytes) -> tuple[ChatRequest, Plan]:
        req = parse_chat_request(body, self.settings)
        answer = derive_answer(req, self.answer_ctx)
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

    async def _events(self, gen: Generation) -> AsyncIterator[str]:
        rid, created, model = uuid.uuid4().hex, int(time.time()), self.settings.served_model_name

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            body = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                 "matched_stop": None}],
                    "usage": None}
            return f"data: {json.dumps(body)}\n\n"

        first = True
        async for unit in gen.units():
            if first:  # SGLang sends the role with the first generated token, i.e. after prefill
                yield chunk({"role": "assistant", "content": ""})
                first = False
            yield chunk(_delta(unit))
        if first:
            yield chunk({"role": "assistant", "content": ""})
        yield chunk({}, gen.plan.finish_reason)
        if gen.req.include_usage:
            body = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [], "usage": gen.usage()}
            yield f"data: {json.dumps(body)}\n\n"
        yield "data: [DONE]\n\n"


def _delta(unit: Unit) -> dict[str, Any]:
    if unit.kind == "reasoning":
        return {"reasoning_content": unit.text}
    if unit.kind == "content":
        return {"content": unit.text}
    if unit.kind == "tool_start":
        return {"tool_calls": [{"index": unit.index, "id": unit.call_id, "type": "function",
                                "function": {"name": unit.text, "arguments": ""}}]}
    return {"tool_calls": [{"index": unit.index, "function": {"arguments": unit.text}}]}


class RequestLog:
    """One stderr line per request: method, path, status, tokens, seconds (after the body is sent)."""

    def __init__(self, app: ASGIApp, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.enabled:
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 0

        async def record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        outcome = ""
        try:
            await self.app(scope, receive, record)
        except BaseException as exc:
            outcome = " (stream dropped)" if _is_drop(exc) else f" ({type(exc).__name__})"
            raise
        finally:
            state = scope.get("state") or {}
            tokens = state.get("sim_tokens")
            counts = f" prompt={tokens[0]} completion={tokens[1]}" if tokens else ""
            note = f" {state['sim_note']!r}" if state.get("sim_note") else ""
            log(f"{scope['method']} {scope['path']} {status}{counts} {time.monotonic() - started:.3f}s{outcome}{note}")


def _is_drop(exc: BaseException) -> bool:
    if isinstance(exc, StreamDropped):
        return True
    return any(_is_drop(e) for e in getattr(exc, "exceptions", ()))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kinds = {404: "NotFoundError", 405: "MethodNotAllowedError"}
    message = f"{request.method} {request.url.path}: {exc.detail}"
    return error_response(message, exc.status_code, kinds.get(exc.status_code, "BadRequestError"))


async def _internal_error(request: Request, exc: Exception) -> Response:
    if not _is_drop(exc):  # a dropped stream is the drop_stream fault, already logged
        log(f"internal error on {request.url.path}: {type(exc).__name__}: {exc}")
    return error_response(f"Internal error in the simulator: {type(exc).__name__}: {exc}", 500, "InternalServerError")


def create_app(settings: SimSettings | None = None, on_crash: Callable[[int], None] | None = None) -> Starlette:
    """The starlette app. ``on_crash(status)`` ends the server on crash faults (default: os._exit)."""
    settings = settings or SimSettings()
    sim = SimServer(settings, on_crash or _exit_process)
    routes = [
        Route("/health", sim.health, methods=["GET"]),
        Route("/health_generate", sim.health, methods=["GET"]),
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
        middleware=[Middleware(RequestLog, enabled=settings.log_requests)],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    app.state.sim = sim
    return app
