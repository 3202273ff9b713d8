"""A scripted model server speaking the real wire formats of both providers' APIs.

POST /v1/chat/completions (OpenAI) and POST /v1/messages (Anthropic) answer with the
next scripted reply for the role the system prompt asks for (the proposer's or the
critic's prompt); once a role's script is used up its last reply repeats. Every request
is kept (path, headers, body), so a test can see what the SDKs sent. Standard library
and jsonschema only: the SDKs under test talk to it over real HTTP.

Like the real APIs it enforces the schema it is sent: a schema the provider's
structured-output rules refuse (tests/proposer/provider_rules.py) is answered with that
provider's 400 error body, and a scripted reply that the schema does not admit (a reply
the real API could never produce) is answered with a 500 and kept in `schema_violations`,
which fails the test on leaving the `with`. A script entry may also be `Truncated(text)`
(the reply cut at max_tokens: not validated, as the real API cuts it mid-JSON),
`Unconstrained(text)` (a compatible server that does not constrain decoding to the schema,
as vLLM serving a small model may not: sent as it is) or `Failed(status)` (the provider's
own error body for that status).
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jsonschema

from hyperloom_assets.core.proposer.prompts import CRITIC_PROMPT, load_prompt
from tests.proposer.provider_rules import anthropic_violations, openai_strict_violations


@dataclass(frozen=True)
class Truncated:
    text: str


@dataclass(frozen=True)
class Unconstrained:
    text: str


@dataclass(frozen=True)
class Failed:
    status: int = 500


ScriptEntry = str | Truncated | Unconstrained | Failed


def _role(system: str) -> str:
    return "critic" if system.strip() == load_prompt(CRITIC_PROMPT).text.strip() else "proposer"


class ScriptedLlm:
    def __init__(self, script: dict[str, list[ScriptEntry]]):
        self.script = {role: list(entries) for role, entries in script.items()}
        self.used: dict[str, int] = defaultdict(int)
        self.requests: list[dict] = []
        self.schema_violations: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def __enter__(self) -> ScriptedLlm:
        self._thread.start()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        if exc_type is None:
            assert not self.schema_violations, f"scripted replies the schema sent does not admit: {self.schema_violations}"

    def point_sdk(self, monkeypatch, provider: str) -> None:
        """Point a provider's SDK at this server through its own variables, with a test key."""
        if provider == "openai":
            monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{self.port}/v1")
            monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        else:
            monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{self.port}")
            monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")

    def next_entry(self, role: str) -> ScriptEntry:
        entries = self.script[role]
        entry = entries[min(self.used[role], len(entries) - 1)]
        self.used[role] += 1
        return entry

    def answer(self, api: str, body: dict) -> tuple[int, dict]:
        """(status, body) for one request of `api` ("openai" or "anthropic")."""
        schema, refused = _schema_sent(api, body)
        if refused:
            return 400, _schema_error(api, body, refused[0])
        entry = self.next_entry(_role(_system_text(api, body)))
        if isinstance(entry, Failed):
            return entry.status, _failure(api, entry.status)
        if isinstance(entry, Truncated):
            return 200, _reply(api, body["model"], entry.text, truncated=True)
        if isinstance(entry, Unconstrained):
            return 200, _reply(api, body["model"], entry.text)
        if schema is not None:
            try:
                jsonschema.Draft202012Validator(schema).validate(json.loads(entry))
            except (jsonschema.ValidationError, json.JSONDecodeError) as exc:
                self.schema_violations.append(f"{api}: {str(exc).splitlines()[0]}")
                return 500, _failure(api, 500)
        return 200, _reply(api, body["model"], entry)

    def _handler(self):
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                llm.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                api = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}.get(self.path)
                if api is None:
                    self.send_error(404)
                    return
                status, reply = llm.answer(api, body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _system_text(api: str, body: dict) -> str:
    if api == "openai":
        return next(m["content"] for m in body["messages"] if m["role"] == "system")
    return body["system"] if isinstance(body["system"], str) else body["system"][0]["text"]


def _schema_sent(api: str, body: dict) -> tuple[dict[str, Any] | None, list[str]]:
    """The reply schema the request asks for, and why the provider would refuse it."""
    if api == "openai":
        fmt = body.get("response_format") or {}
        if fmt.get("type") != "json_schema":
            return None, []
        schema = fmt["json_schema"]["schema"]
        return schema, openai_strict_violations(schema) if fmt["json_schema"].get("strict") else []
    fmt = (body.get("output_config") or {}).get("format") or {}
    if fmt.get("type") != "json_schema":
        return None, []
    return fmt["schema"], anthropic_violations(fmt["schema"])


def _schema_error(api: str, body: dict, problem: str) -> dict:
    if api == "openai":
        name = body["response_format"]["json_schema"].get("name", "response")
        return {"error": {"message": f"Invalid schema for response_format '{name}': {problem}",
                          "type": "invalid_request_error", "param": "response_format", "code": None}}
    return {"type": "error", "error": {"type": "invalid_request_error", "message": f"output_config.format.schema: {problem}"},
            "request_id": "req_scripted"}


def _failure(api: str, status: int) -> dict:
    if api == "openai":
        return {"error": {"message": "The server had an error while processing your request.", "type": "server_error",
                          "param": None, "code": None}}
    kind = "overloaded_error" if status == 529 else "api_error"
    return {"type": "error", "error": {"type": kind, "message": "Overloaded" if status == 529 else "Internal server error"},
            "request_id": "req_scripted"}


def _reply(api: str, model: str, text: str, truncated: bool = False) -> dict:
    if api == "openai":
        return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 1764662400, "model": model,
                "choices": [{"index": 0, "finish_reason": "length" if truncated else "stop", "logprobs": None,
                             "message": {"role": "assistant", "content": text, "refusal": None}}],
                "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500}}
    return {"id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "max_tokens" if truncated else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 1100, "output_tokens": 250}}
