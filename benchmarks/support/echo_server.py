"""A trivial OpenAI-compatible streaming server, to test and to load the client itself.

It runs no model: a completion streams `max_tokens` one-token chunks, each after an
optional delay, in the exact SSE shape vLLM's `/v1/completions` writes, and reports
honest usage. Flags inject the faults the client must catch (a short answer, missing
usage, a context limit; `--misbehave KIND`: a chunk of the wrong shape, a line or an error
body without end). Run: `python -m benchmarks.support.echo_server --port P`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from aiohttp import web


def _chunk(request_id: str, text: str, finish: str | None) -> bytes:
    body = {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": "echo",
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}], "usage": None}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _usage_chunk(request_id: str, prompt: int, completion: int) -> bytes:
    body = {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": "echo",
            "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                     "total_tokens": prompt + completion}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


# --misbehave KIND: what the client must end as a failed request of its class, not an exception
# or a stream buffered without end.
MISBEHAVIOURS = ("chunk-list", "chunk-number", "usage-list", "endless-line", "endless-error")
ENDLESS_PIECE = b"a" * 16384
ENDLESS_GAP_S = 0.002


async def _misbehave(kind: str, request: web.Request, request_id: str) -> web.StreamResponse:
    response = web.StreamResponse(status=500 if kind == "endless-error" else 200,
                                  headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    try:
        if kind in ("endless-line", "endless-error"):
            await response.write(b'data: {"error": "' if kind == "endless-line" else b'{"message": "')
            while True:  # until the client gives up and the write fails
                await response.write(ENDLESS_PIECE)
                await asyncio.sleep(ENDLESS_GAP_S)
        elif kind == "usage-list":
            await response.write(_chunk(request_id, "a", "length"))
            await response.write(b'data: {"choices": [], "usage": [1]}\n\n')
        else:
            await response.write(b"data: []\n\n" if kind == "chunk-list" else b"data: 5\n\n")
        await response.write(b"data: [DONE]\n\n")
    except (ConnectionError, RuntimeError):  # the client hung up (aiohttp raises either)
        pass
    return response


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"object": "error", "message": message, "type": "BadRequestError", "code": status},
                             status=status)


class EchoServer:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.served = 0
        self.peers: set[tuple] = set()  # one (host, port) per TCP connection a completion came on
        self.rng = random.Random(args.seed)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.peers.add(request.transport.get_extra_info("peername"))
        args = self.args
        if body.get("model") != args.model:
            return _error(404, f"The model `{body.get('model')}` does not exist.")
        prompt = body.get("prompt")
        if isinstance(prompt, str) and prompt:
            prompt = prompt.split()  # text prompts (vLLM's client sends text): a word per token
        if not isinstance(prompt, list) or not prompt:
            return _error(400, "prompt must be non-empty text or a list of token IDs")
        max_tokens = int(body.get("max_tokens") or 16)
        if args.max_model_len and len(prompt) + max_tokens > args.max_model_len:
            return _error(400, f"This model's maximum context length is {args.max_model_len} tokens.")
        produced = max(1, max_tokens - args.short_by)
        if args.misbehave:
            self.served += 1
            return await _misbehave(args.misbehave, request, f"cmpl-{self.served}")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        request_id = f"cmpl-{self.served}"
        self.served += 1
        # Per-request speed noise, so A/A comparisons see realistic spread.
        factor = max(0.0, self.rng.gauss(1.0, args.noise_pct / 100)) if args.noise_pct else 1.0
        if args.ttft_ms:
            await asyncio.sleep(factor * args.ttft_ms / 1000)
        middle, last = _chunk(request_id, "a", None), _chunk(request_id, "a", "length")
        held_middle, held_last = _chunk(request_id, "", None), _chunk(request_id, "", "length")
        pending = b""
        for index in range(produced):
            if index and args.token_delay_ms:
                await asyncio.sleep(factor * args.token_delay_ms / 1000)
            held = args.held_back_every and index % args.held_back_every == 0
            if index == produced - 1:
                pending += held_last if held else last
            else:
                pending += held_middle if held else middle
            # --burst N writes N events at once: the server's cost per event drops far
            # below the client's, so a capacity benchmark measures the client.
            if index == produced - 1 or (index + 1) % args.burst == 0:
                await response.write(pending)
                pending = b""
        usage = (body.get("stream_options") or {}).get("include_usage") and not args.no_usage
        if usage:
            await response.write(_usage_chunk(request_id, len(prompt) + args.prompt_skew, produced))
        await response.write(b"data: [DONE]\n\n")
        return response

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.args.model, "object": "model",
                                                              "max_model_len": self.args.max_model_len or 4096}]})

    async def health(self, _: web.Request) -> web.Response:
        return web.Response(text="")

    async def connections(self, _: web.Request) -> web.Response:
        """How many TCP connections the completions came on, to test the client's pooling."""
        return web.json_response({"connections": len(self.peers)})


def build_app(args: argparse.Namespace) -> web.Application:
    server = EchoServer(args)
    app = web.Application(client_max_size=64 * 1024**2)
    app.router.add_post("/v1/completions", server.completions)
    app.router.add_get("/v1/models", server.models)
    app.router.add_get("/health", server.health)
    app.router.add_get("/echo/connections", server.connections)
    return app


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="echo")
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    parser.add_argument("--max-model-len", type=int, default=0)
    parser.add_argument("--short-by", type=int, default=0, help="stream this many tokens fewer than asked")
    parser.add_argument("--prompt-skew", type=int, default=0, help="misreport prompt_tokens by this many")
    parser.add_argument("--burst", type=int, default=1, help="write this many events per socket write")
    parser.add_argument("--held-back-every", type=int, default=0,
                        help="stream every Nth token (the first included) with empty text, as vLLM does "
                             "while its detokenizer holds back a partial UTF-8 character; 1 empties them all")
    parser.add_argument("--noise-pct", type=float, default=0.0, help="per-request speed noise (stdev, percent)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-usage", action="store_true", help="ignore stream_options.include_usage")
    parser.add_argument("--misbehave", choices=MISBEHAVIOURS, default=None,
                        help="answer every completion so: a chunk `[]`, a chunk `5`, a usage `[1]`, "
                             "a stream line or an HTTP 500 body that never ends")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    web.run_app(build_app(args), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
