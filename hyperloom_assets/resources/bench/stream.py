"""One streamed completion request over raw aiohttp, timed as `vllm bench serve` times it.

The openai SDK costs about ten times more per stream event than reading SSE lines off
the socket; at thousands of events per second that overhead would show up as the
server's latency, so the client parses the stream itself.
"""

from __future__ import annotations

import json
import time

import aiohttp

from hyperloom_assets.core.measurement.measurement import RequestRecord
from hyperloom_assets.core.measurement.workloads import PlannedRequest

# Long generations on slow servers legitimately stream for minutes; a read gap this long
# means the server stalled, and the request is recorded as failed instead of hanging.
DEFAULT_SOCK_READ_TIMEOUT_S = 600.0
# Ten MB read buffer: under heavy load many chunks arrive before the loop reads them.
READ_BUFSIZE = 10 * 1024**2
# What the client reads of a server, at most: one SSE line (a chunk of vLLM's is a few hundred
# bytes; a line that long is a server that never ends it, and buffering it whole grows without
# bound), and the body of an error (only its start is shown).
MAX_LINE_BYTES = 1024**2
MAX_ERROR_BODY_BYTES = 64 * 1024
# A pooled connection idle longer than this is closed by the client instead of reused.
# vLLM's uvicorn closes an idle keep-alive connection after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE),
# SGLang's after 5 s too; aiohttp's own 15 s let the client reuse a connection the server was
# closing at that moment, and the request failed with "Can not write request body".
KEEPALIVE_S = 2.0


def completions_url(base_url: str) -> str:
    """The server root plus `/v1/completions`, as `vllm bench serve --base-url` means it."""
    return base_url.rstrip("/") + "/v1/completions"


def request_payload(model: str, request: PlannedRequest) -> dict:
    return {
        "model": model,
        "prompt": request.prompt_ids,
        "max_tokens": request.output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }


def open_session(sock_read_timeout_s: float = DEFAULT_SOCK_READ_TIMEOUT_S) -> aiohttp.ClientSession:
    """One session per measurement: pooled keep-alive connections, no connection cap."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=sock_read_timeout_s)
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_S)
    return aiohttp.ClientSession(timeout=timeout, connector=connector, read_bufsize=READ_BUFSIZE)


class MalformedChunk(ValueError):
    """A stream event that is not a completion chunk: not JSON, or JSON of another shape."""


class OversizedStream(ValueError):
    """A stream line longer than MAX_LINE_BYTES, or more than that after [DONE]."""


def _chunk_of(data: bytes) -> dict:
    """The event's JSON, checked for the shape the client reads: an object, `choices` a list,
    `usage` an object (each may be null or absent)."""
    try:
        chunk = json.loads(data)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, a number past int's digit limit, nested deep
        raise MalformedChunk(f"a stream event that is not JSON ({type(exc).__name__}: {str(exc)[:120]})") from exc
    if not isinstance(chunk, dict):
        raise MalformedChunk(f"a stream event that is a JSON {type(chunk).__name__}, not an object")
    for field, kind in (("choices", list), ("usage", dict)):
        if chunk.get(field) is not None and not isinstance(chunk[field], kind):
            raise MalformedChunk(f"a stream event whose {field!r} is a JSON {type(chunk[field]).__name__}, "
                                 f"not {'a list' if kind is list else 'an object'}")
    return chunk


class _StreamState:
    __slots__ = ("start", "first", "last", "gaps", "usage")

    def __init__(self, start: float):
        self.start = start
        self.first = 0.0
        self.last = start
        self.gaps: list[float] = []
        self.usage: dict | None = None

    def on_data(self, data: bytes) -> None:
        chunk = _chunk_of(data)
        usage = chunk.get("usage")
        if usage:
            self.usage = usage
        # Every chunk with a choice is a token the server streamed, even when its text
        # is empty: vLLM's detokenizer holds back a partial UTF-8 character and sends "",
        # and `vllm bench serve` times such a chunk like any other (TTFT, ITL, e2el). Only
        # the usage-only tail (`choices: []`) carries no token.
        if chunk.get("choices"):
            now = time.perf_counter()
            if self.first == 0.0:
                self.first = now
            else:
                self.gaps.append(now - self.last)
            self.last = now


def _usage_error(usage: dict | None, request: PlannedRequest) -> str | None:
    """Why the server's own token count disagrees with what was asked, if it does."""
    if usage is None:
        return "the stream carried no usage (stream_options.include_usage ignored?)"
    completion = usage.get("completion_tokens")
    if completion != request.output_tokens:
        return f"server reported completion_tokens={completion}, requested {request.output_tokens}"
    prompt = usage.get("prompt_tokens")
    if prompt is not None and prompt != len(request.prompt_ids):
        return f"server reported prompt_tokens={prompt}, sent {len(request.prompt_ids)}"
    return None


async def _read_stream(response: aiohttp.ClientResponse, state: _StreamState) -> None:
    # Whatever arrived, in one piece: line-by-line reads cost an await per event, which
    # caps the client well below what a fast server streams. The body is read to its end,
    # past [DONE], as `vllm bench serve` reads it: a response left with its last chunk
    # unread closes its connection instead of handing it back to the pool. The unfinished
    # line grows in place and only what arrived is searched, so a line costs its length once;
    # one past MAX_LINE_BYTES, or that much more after [DONE], ends the request.
    pending = bytearray()
    done, after_done = False, 0
    async for received in response.content.iter_any():
        if done:
            after_done += len(received)
            if after_done > MAX_LINE_BYTES:
                raise OversizedStream(f"more than {MAX_LINE_BYTES} bytes after the stream's [DONE]")
            continue
        searched = len(pending)
        pending += received
        end = pending.rfind(b"\n", searched)
        if end >= 0:
            lines = bytes(pending[:end]).split(b"\n")
            del pending[:end + 1]
            done = _on_lines(lines, state)
        if len(pending) > MAX_LINE_BYTES:
            raise OversizedStream(f"a stream line longer than {MAX_LINE_BYTES} bytes")
    if not done and pending.startswith(b"data:") and pending[5:].strip() not in (b"", b"[DONE]"):
        state.on_data(bytes(pending[5:]).strip())


def _on_lines(lines: list[bytes], state: _StreamState) -> bool:
    """Feed complete SSE lines to the state; whether the stream's [DONE] was among them."""
    for line in lines:
        if len(line) > MAX_LINE_BYTES:  # arrived whole in one read
            raise OversizedStream(f"a stream line longer than {MAX_LINE_BYTES} bytes")
        if not line.startswith(b"data:"):
            continue  # blank separators, keep-alive comments
        data = line[5:].strip()
        if data == b"[DONE]":
            return True
        state.on_data(data)
    return False


async def _error_body(response: aiohttp.ClientResponse) -> str:
    """The start of an error's body, MAX_ERROR_BODY_BYTES at most: a server may send one without end."""
    body = bytearray()
    while len(body) < MAX_ERROR_BODY_BYTES:
        received = await response.content.read(MAX_ERROR_BODY_BYTES - len(body))
        if not received:
            break
        body += received
    return body.decode(errors="replace")


def error_class_of(exc: BaseException) -> str:
    """Which way a request failed, from the exception aiohttp or the stream parser raised."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "server_gone"  # refused: nothing listens on the port any more
    if isinstance(exc, (TimeoutError, aiohttp.ServerTimeoutError)):
        return "stalled"
    if isinstance(exc, OversizedStream):
        return "oversized_stream"
    if isinstance(exc, MalformedChunk):
        return "malformed_stream"
    return "connection_dropped"  # disconnected, reset, a payload cut short


async def send_request(session: aiohttp.ClientSession, url: str, model: str,
                       request: PlannedRequest, round_start: float, arrived: float | None = None,
                       from_arrival: bool = False) -> RequestRecord:
    """Send one planned request and time it; failures become records (with their class), never exceptions.

    `arrived`: its scheduled arrival in a rate round (perf_counter), kept in the record; with
    `from_arrival` its TTFT and E2E are timed from then, its wait for a concurrency slot included,
    else from its send, as `vllm bench serve` times them."""
    base = dict(prompt_tokens=len(request.prompt_ids), session_id=request.session_id,
                turn=request.turn if request.session_id is not None else None,
                arrival_s=arrived - round_start if arrived is not None else None)
    sent = time.perf_counter()
    start = arrived if from_arrival and arrived is not None else sent
    state = _StreamState(start)
    error: str | None = None
    error_class = "bad_response"
    try:
        async with session.post(url, json=request_payload(model, request)) as response:
            if response.status != 200:
                body = (await _error_body(response))[:300]
                error, error_class = f"HTTP {response.status}: {body}", "http_error"
            else:
                await _read_stream(response, state)
    except (aiohttp.ClientError, TimeoutError, MalformedChunk, OversizedStream) as exc:
        error, error_class = f"{type(exc).__name__}: {exc}", error_class_of(exc)
    start_s = sent - round_start
    if error is None and state.first == 0.0:
        error = "the stream ended without a single token"
    if error is None:
        error = _usage_error(state.usage, request)
    if error is not None:
        return RequestRecord(ok=False, start_s=start_s, error=error, error_class=error_class, **base)
    return RequestRecord(ok=True, output_tokens=request.output_tokens, start_s=start_s,
                         ttft_s=state.first - start, e2el_s=state.last - start, itl_s=state.gaps, **base)
