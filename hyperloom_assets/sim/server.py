"""`sim-serve`'s HTTP side: the OpenAI API over the sim scheduler, paced by the wall clock.

The engine loop plans a step, sleeps until the step's simulated end time maps to the
wall clock (`--time-scale` simulated seconds per wall second), then applies it. Requests
arriving meanwhile join the next step, as in a real engine. Streams do not send one
event per token: a request's handler wakes at its first token, at its end, and otherwise
at most every `--stream-interval-ms`, and sends every token that became due since its
last event in one chunk, as busy real engines do.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

from aiohttp import web

from hyperloom_assets.sim.engine_args import EngineConfig
from hyperloom_assets.sim.faults import Fault, misbehave
from hyperloom_assets.sim.profiler import SimProfiler
from hyperloom_assets.sim.prompts import PromptError, PromptTokenizer, filler_text
from hyperloom_assets.sim.scheduler import SimEngine, SimRequest
from hyperloom_assets.sim.synthetic_model import CANDIDATES, Step, generate
from hyperloom_assets.sim.telemetry import prometheus_text

TIMER_SLACK_S = 0.0005
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _error(status: int, message: str, kind: str = "BadRequestError") -> web.Response:
    return web.json_response({"object": "error", "message": message, "type": kind, "param": None, "code": status},
                             status=status)


class SimServer:
    def __init__(self, engine: SimEngine, config: EngineConfig, tokenizer: PromptTokenizer,
                 time_scale: float, stream_interval_s: float, output_salt: str = "", fault: Fault | None = None,
                 profiler: SimProfiler | None = None):
        self.engine = engine
        self.output_salt = output_salt  # non-empty: a flag named by --alter-outputs-with was given
        self.fault = fault or Fault()
        self.received = 0  # completion requests, counted for the fault
        self.profiler = profiler
        self.config = config
        self.tokenizer = tokenizer
        self.time_scale = time_scale
        self.stream_interval_s = stream_interval_s
        self.work = asyncio.Event()
        self.t0 = 0.0
        self.created = int(time.time())

    # ---- the engine loop ----------------------------------------------------------------
    def sim_now(self) -> float:
        return (asyncio.get_running_loop().time() - self.t0) * self.time_scale

    async def run_engine(self) -> None:
        loop = asyncio.get_running_loop()
        self.t0 = loop.time()
        engine = self.engine
        while True:
            if not engine.has_work():
                self.work.clear()
                await self.work.wait()
            engine.now = max(engine.now, self.sim_now()) if not engine.running else engine.now
            step = engine.plan_step()
            if step is None:  # nothing can run yet; wait for a change
                self.work.clear()
                await self.work.wait()
                continue
            delay = self.t0 + (engine.now + step.duration) / self.time_scale - loop.time()
            # The selector rounds timeouts up to whole milliseconds; aiming half a
            # millisecond early makes results as often early as late instead of always late.
            await asyncio.sleep(max(delay - TIMER_SLACK_S, 0.0))  # sleep(0) lets handlers run when behind
            if self.profiler is not None:
                self.profiler.record(step.shape, engine.now, step.duration)
            for request in engine.apply_step(step):
                if request.waiter is not None:
                    request.waiter.set()

    def submit(self, prompt_ids: list[int], max_tokens: int) -> SimRequest:
        request = self.engine.new_request(prompt_ids, max_tokens, self.sim_now())
        request.waiter = asyncio.Event()
        self.engine.submit(request)
        self.work.set()
        return request

    async def _wait(self, request: SimRequest, paced: bool) -> None:
        """Until the request's first token or end, or (once streaming) the next pacing tick."""
        handle = asyncio.get_running_loop().call_later(self.stream_interval_s, request.waiter.set) if paced else None
        await request.waiter.wait()
        request.waiter.clear()
        if handle is not None:
            handle.cancel()

    # ---- HTTP -----------------------------------------------------------------------
    def routes(self) -> list[web.RouteDef]:
        routes = [web.get("/health", self.health), web.get("/v1/models", self.models), web.get("/version", self.version),
                  web.post("/v1/completions", self.completions), web.post("/v1/chat/completions", self.chat),
                  web.get("/metrics", self.metrics)]
        if self.profiler is not None:  # as vLLM: the routes exist only when a profiler is configured
            routes += [web.post("/start_profile", self.start_profile), web.post("/stop_profile", self.stop_profile)]
        return routes

    async def start_profile(self, _: web.Request) -> web.Response:
        self.profiler.start(max(self.engine.now, self.sim_now()))
        return web.Response(status=200)

    async def stop_profile(self, _: web.Request) -> web.Response:
        path = self.profiler.stop()
        return web.json_response({"trace": str(path) if path else None})

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(status=200)

    async def metrics(self, _: web.Request) -> web.Response:
        text = prometheus_text(self.engine.meter, self.config.flavor)
        if text is None:  # ATOM serves no /metrics
            return web.Response(status=404)
        return web.Response(text=text, content_type="text/plain")

    async def version(self, _: web.Request) -> web.Response:
        return web.json_response({"version": f"sim-{self.config.flavor}"})

    async def models(self, _: web.Request) -> web.Response:
        data = [{"id": name, "object": "model", "created": self.created, "owned_by": self.config.flavor,
                 "root": self.config.model, "parent": None, "max_model_len": self.engine.max_model_len}
                for name in self.config.served_names]
        return web.json_response({"object": "list", "data": data})

    async def completions(self, http: web.Request) -> web.StreamResponse:
        return await self._serve(http, chat=False)

    async def chat(self, http: web.Request) -> web.StreamResponse:
        return await self._serve(http, chat=True)

    def _read(self, body: Any, chat: bool) -> tuple[list[int], int]:
        if not isinstance(body, dict):
            raise PromptError("the request body must be a JSON object")
        ids = self.tokenizer.chat_prompt(body.get("messages")) if chat else self.tokenizer.completion_prompt(body.get("prompt"))
        max_tokens = body.get("max_completion_tokens") if chat else None
        max_tokens = max_tokens or body.get("max_tokens")
        if max_tokens is None:
            max_tokens = self.engine.max_model_len - len(ids) if chat else 16
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise PromptError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if len(ids) + max_tokens > self.engine.max_model_len:
            raise PromptError(
                f"This model's maximum context length is {self.engine.max_model_len} tokens. However, you requested "
                f"{len(ids) + max_tokens} tokens ({len(ids)} in the messages, {max_tokens} in the completion). "
                "Please reduce the length of the messages or completion.")
        return ids, max_tokens

    async def _serve(self, http: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await http.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "the request body is not valid JSON")
        if isinstance(body, dict) and body.get("model") not in (None, *self.config.served_names):
            return _error(404, f"The model `{body.get('model')}` does not exist.", "NotFoundError")
        reply = _Reply(body, chat, self.config.served_names[0], self.created)
        try:
            ids, max_tokens = self._read(body, chat)
            if not chat and not body.get("stream") and body.get("logprobs") is not None:
                reply.steps = self._greedy(body, ids, max_tokens)
        except PromptError as exc:
            return _error(400, str(exc))
        self.received += 1
        if self.fault.due(self.received):
            return await misbehave(self.fault, http, self.received, reply.chunk(0, 1, False))
        request = self.submit(ids, max_tokens)
        try:
            if body.get("stream"):
                return await self._stream(http, request, reply)
            while request.phase != "done":
                await self._wait(request, paced=False)
            return web.json_response(reply.whole(request))
        except BaseException:
            if request.phase not in ("done", "aborted"):
                self.engine.abort(request)  # the client went away: free its seat and blocks
            raise

    def _greedy(self, body: dict, ids: list[int], max_tokens: int) -> list[Step]:
        """The synthetic model's tokens for a request that asks for logprobs (the accuracy gate's)."""
        count = body.get("logprobs")
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= CANDIDATES:
            raise PromptError(f"logprobs must be an integer from 0 to {CANDIDATES}, got {count!r}")
        return generate(ids, max_tokens, self.engine.model.shape.vocab, self.output_salt)

    async def _stream(self, http: web.Request, request: SimRequest, reply: _Reply) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        await response.prepare(http)
        sent = 0
        while True:
            produced = self.engine.tokens_out(request)
            done = request.phase == "done"
            if produced > sent:
                await response.write(reply.chunk(sent, produced, done))
                sent = produced
            if done:
                break
            await self._wait(request, paced=sent > 0)
        if reply.include_usage:
            await response.write(reply.usage_chunk(request))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


class _Reply:
    """OpenAI-shaped response bodies for one request (vLLM's field set)."""

    def __init__(self, body: dict, chat: bool, model: str, created: int):
        self.chat = chat
        self.model = body.get("model") or model
        self.created = created
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.object = "chat.completion" if chat else "text_completion"
        self.steps: list[Step] | None = None  # the synthetic model's tokens, when logprobs were asked for
        self.top_k = body.get("logprobs") or 0
        self.token_ids = bool(body.get("return_tokens_as_token_ids"))
        options = body.get("stream_options") or {}
        self.include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False

    def _usage(self, request: SimRequest) -> dict[str, Any]:
        return {"prompt_tokens": request.prompt_len, "total_tokens": request.prompt_len + request.max_tokens,
                "completion_tokens": request.max_tokens,
                "prompt_tokens_details": {"cached_tokens": request.cached_tokens}}

    def _event(self, payload: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"

    def chunk(self, first: int, last: int, done: bool) -> bytes:
        text = filler_text(first, last)
        finish = "length" if done else None
        if self.chat:
            delta = {"role": "assistant", "content": text} if first == 0 else {"content": text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            kind = "text_completion"
        return self._event({"id": self.id, "object": kind, "created": self.created, "model": self.model,
                            "choices": [choice]})

    def usage_chunk(self, request: SimRequest) -> bytes:
        kind = "chat.completion.chunk" if self.chat else "text_completion"
        return self._event({"id": self.id, "object": kind, "created": self.created, "model": self.model,
                            "choices": [], "usage": self._usage(request)})

    def _token(self, token: int) -> str:
        return f"token_id:{token}" if self.token_ids else f" t{token}"

    def _logprobs(self) -> tuple[str, dict[str, Any]]:
        """vLLM's completions shape: tokens, their logprobs, the top-k at each step, offsets."""
        assert self.steps is not None
        tokens = [self._token(step.token) for step in self.steps]
        offsets, at = [], 0
        for token in tokens:
            offsets.append(at)
            at += len(token)
        logprobs = {"text_offset": offsets, "token_logprobs": [step.top[0][1] for step in self.steps], "tokens": tokens,
                    "top_logprobs": [{self._token(t): lp for t, lp in step.top[:self.top_k]} for step in self.steps]}
        return "".join(f" t{step.token}" for step in self.steps), logprobs

    def whole(self, request: SimRequest) -> dict[str, Any]:
        text, logprobs = filler_text(0, request.max_tokens), None
        if self.steps is not None:
            text, logprobs = self._logprobs()
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length", "stop_reason": None}
        return {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
                "choices": [choice], "usage": self._usage(request)}
