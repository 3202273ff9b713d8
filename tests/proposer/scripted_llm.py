"""A scripted model server speaking the real wire formats of both providers' APIs.

POST /v1/chat/completions (OpenAI) and POST /v1/messages (Anthropic) answer with the
next scripted reply text for the role the system prompt asks for (the proposer's or the
critic's prompt); once a role's script is used up its last reply repeats. Every request
is kept (path, headers, body), so a test can see what the SDKs sent. Standard library
only: the SDKs under test talk to it over real HTTP.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hyperloom_assets.core.proposer.prompts import CRITIC_PROMPT, load_prompt


def _role(system: str) -> str:
    return "critic" if system.strip() == load_prompt(CRITIC_PROMPT).text.strip() else "proposer"


class ScriptedLlm:
    def __init__(self, script: dict[str, list[str]]):
        self.script = {role: list(texts) for role, texts in script.items()}
        self.used: dict[str, int] = defaultdict(int)
        self.requests: list[dict] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def __enter__(self) -> ScriptedLlm:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def next_text(self, role: str) -> str:
        texts = self.script[role]
        text = texts[min(self.used[role], len(texts) - 1)]
        self.used[role] += 1
        return text

    def _handler(self):
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                llm.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if self.path == "/v1/chat/completions":
                    system = next(m["content"] for m in body["messages"] if m["role"] == "system")
                    reply = _openai_reply(body["model"], llm.next_text(_role(system)))
                elif self.path == "/v1/messages":
                    system = body["system"] if isinstance(body["system"], str) else body["system"][0]["text"]
                    reply = _anthropic_reply(body["model"], llm.next_text(_role(system)))
                else:
                    self.send_error(404)
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _openai_reply(model: str, text: str) -> dict:
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 1764662400, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": text, "refusal": None}}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500}}


def _anthropic_reply(model: str, text: str) -> dict:
    return {"id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 1100, "output_tokens": 250}}
