"""The proposer's and critic's prompts: versioned files of this package, never strings in code. Pure code.

A prompt's version is its file's name and a hash of its text (`proposer/v1@3f2a...`), so
the record says exactly which words a call was made with.
"""

from __future__ import annotations

import json
from pathlib import Path

from hyperloom_assets.core.hashing import text_hash
from hyperloom_assets.core.models import Frozen

PROMPTS_DIR = Path(__file__).parent / "prompts"
PROPOSER_PROMPT = "proposer_v1"
CRITIC_PROMPT = "critic_v1"


class Prompt(Frozen):
    version: str
    text: str


def load_prompt(name: str, folder: Path = PROMPTS_DIR) -> Prompt:
    text = (folder / f"{name}.md").read_text()
    role, _, number = name.rpartition("_")
    return Prompt(version=f"{role}/{number}@{text_hash(text)}", text=text)


def render(payload: dict) -> str:
    """The user message: the evidence as compact JSON, keys in the order given."""
    return json.dumps(payload, separators=(",", ":"), default=str)
