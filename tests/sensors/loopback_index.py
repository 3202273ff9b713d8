"""A package index on 127.0.0.1: PEP 503 simple pages, the JSON API and the files.

`/simple/<name>/` and `/pypi/<name>/json` list the wheels published so far;
`/files/<wheel>` serves them. `answer_raw` replaces a package's JSON answer (a 404,
garbage) to exercise the sensor's error paths.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class LoopbackIndex:
    def __init__(self) -> None:
        self.wheels: dict[str, dict[str, Path]] = {}  # package -> version -> wheel
        self.raw: dict[str, tuple[int, bytes]] = {}  # package -> (status, JSON API body)
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def json_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/pypi"

    @property
    def simple_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/simple"

    def publish(self, package: str, version: str, wheel: Path) -> None:
        self.wheels.setdefault(normalize(package), {})[version] = wheel

    def answer_raw(self, package: str, status: int, body: bytes) -> None:
        self.raw[normalize(package)] = (status, body)

    def start(self) -> "LoopbackIndex":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _json(self, package: str) -> tuple[int, bytes]:
        if package in self.raw:
            return self.raw[package]
        versions = self.wheels.get(package)
        if not versions:
            return 404, b'{"message": "Not Found"}'
        releases = {version: [{"filename": wheel.name, "url": f"/files/{wheel.name}", "yanked": False,
                               "digests": {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}}]
                    for version, wheel in versions.items()}
        newest = sorted(versions, key=lambda v: [int(p) for p in v.split(".")])[-1]
        return 200, json.dumps({"info": {"name": package, "version": newest}, "releases": releases}).encode()

    def _simple(self, package: str) -> tuple[int, bytes]:
        versions = self.wheels.get(package)
        if not versions:
            return 404, b"not found"
        links = "".join(
            f'<a href="/files/{html.escape(w.name)}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}">'
            f"{html.escape(w.name)}</a><br>\n" for w in versions.values())
        return 200, f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode()

    def _file(self, name: str) -> tuple[int, bytes]:
        for versions in self.wheels.values():
            for wheel in versions.values():
                if wheel.name == name:
                    return 200, wheel.read_bytes()
        return 404, b"not found"

    def route(self, path: str) -> tuple[int, bytes, str]:
        self.requests.append(path)
        parts = [p for p in path.split("?")[0].split("/") if p]
        if len(parts) == 3 and parts[0] == "pypi" and parts[2] == "json":
            return (*self._json(normalize(parts[1])), "application/json")
        if len(parts) == 2 and parts[0] == "simple":
            return (*self._simple(normalize(parts[1])), "text/html")
        if len(parts) == 2 and parts[0] == "files":
            return (*self._file(parts[1]), "application/octet-stream")
        return 404, b"not found", "text/plain"

    def _handler(self):
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                status, body, kind = index.route(self.path)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        return Handler
