"""A sim server that misbehaves on purpose: the faults a real server shows, on request.

`--fault KIND` (a harness flag, so never a candidate) makes the server misbehave from
request `--fault-after-requests` + 1 on, counting every completion request it received:

- `exit`: the process exits at once, its streams cut and its port closed, as an engine
  that dies mid-run (an OOM kill, a crashed worker);
- `stall`: the request is accepted and its stream opened, and no token ever comes, while
  /health stays up, as a wedged scheduler;
- `http-500`: an HTTP 500 error body, as an engine whose request handler raises;
- `malformed-chunk`: a stream whose first event is not JSON;
- `wrong-shape-chunk`: a stream whose first event is JSON of the wrong shape (`[]`), as a
  proxy or a half-upgraded server may send;
- `endless-line`: a stream that never ends its first line, as a server that trickles
  bytes without a newline (the client caps a line, resources/bench/stream.py);
- `drop-connection`: the first token, then the connection is closed under the stream.
"""

from __future__ import annotations

import asyncio
import os
import sys

from aiohttp import web

from hyperloom_assets.core.models import Frozen

EXIT_CODE = 3
ENDLESS_LINE_MIB = 4


class Fault(Frozen):
    kind: str | None = None  # one of engine_args.FAULTS; None: a well-behaved server
    after_requests: int = 0

    def due(self, received: int) -> bool:
        return self.kind is not None and received > self.after_requests


async def misbehave(fault: Fault, http: web.Request, received: int, first_chunk: bytes) -> web.StreamResponse:
    """The fault's answer to the `received`-th request."""
    print(f"sim fault {fault.kind}: request {received} (after {fault.after_requests} served)", flush=True)
    if fault.kind == "exit":
        sys.stdout.flush()
        os._exit(EXIT_CODE)  # no cleanup, as a killed engine: streams and the listening socket close
    if fault.kind == "http-500":
        return web.json_response({"object": "error", "message": "sim fault: internal server error",
                                  "type": "InternalServerError", "param": None, "code": 500}, status=500)
    response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream"})
    await response.prepare(http)
    if fault.kind == "stall":
        await asyncio.Event().wait()  # until the client gives up and the handler is cancelled
    if fault.kind == "malformed-chunk":
        await response.write(b'data: {"id": "cmpl-broken", "choices": [\n\n')
        await response.write_eof()
        return response
    if fault.kind == "wrong-shape-chunk":
        await response.write(b"data: []\n\n")
        await response.write_eof()
        return response
    if fault.kind == "endless-line":
        for _ in range(ENDLESS_LINE_MIB):  # past the client's 1 MiB line cap, then more
            await response.write(b"data: " + b"x" * 1024**2)
        await response.write_eof()
        return response
    await response.write(first_chunk)  # drop-connection: one token, then the socket closes
    if http.transport is not None:
        http.transport.close()
    return response
