"""Prompts to token IDs and generated filler text, for the sim's HTTP server.

Text is tokenized with the model folder's `tokenizer.json` (the `tokenizers` library)
when there is one; otherwise every 4 characters count as one token, with IDs derived
from the characters so that equal prefixes still share cache blocks.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

CHARS_PER_TOKEN = 4
FILLER_WORDS = (" the", " sim", " engine", " serves", " tokens", " at", " a", " steady", " pace", ".")


class PromptError(ValueError):
    """A prompt the server cannot read; answered with HTTP 400."""


class PromptTokenizer:
    def __init__(self, model_dir: Path, tokenizer: str | None = None):
        self._tokenizer: Any = None
        path = Path(tokenizer) / "tokenizer.json" if tokenizer else model_dir / "tokenizer.json"
        if path.is_file():
            from tokenizers import Tokenizer  # imported only when there is a tokenizer to load

            self._tokenizer = Tokenizer.from_file(str(path))

    def encode(self, text: str) -> list[int]:
        if self._tokenizer is not None:
            return list(self._tokenizer.encode(text).ids)
        return [zlib.crc32(text[i:i + CHARS_PER_TOKEN].encode()) % 1_000_000
                for i in range(0, len(text), CHARS_PER_TOKEN)] or [0]

    def completion_prompt(self, prompt: Any) -> list[int]:
        """A completions `prompt`: text, a list of token IDs, or a batch of exactly one of those."""
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return self.encode(prompt)
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return list(prompt)
        raise PromptError("prompt must be a string, a non-empty list of token IDs, or a batch of one of those")

    def chat_prompt(self, messages: Any) -> list[int]:
        if not isinstance(messages, list) or not messages:
            raise PromptError("messages must be a non-empty list")
        parts = []
        for message in messages:
            if not isinstance(message, dict):
                raise PromptError("each message must be an object with role and content")
            content = message.get("content") or ""
            if isinstance(content, list):  # content parts: keep the text ones
                content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
            parts.append(f"<|start_header_id|>{message.get('role', 'user')}<|end_header_id|>\n\n{content}<|eot_id|>")
        parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
        return self.encode("".join(parts))


def filler_text(first: int, last: int) -> str:
    """The text of generated tokens first..last-1: one filler word per token, never empty."""
    return "".join(FILLER_WORDS[i % len(FILLER_WORDS)] for i in range(first, last))
