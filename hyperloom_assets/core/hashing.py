"""The one way the project hashes: short SHA-1 digests of text, canonical JSON and files.

Pure code. SHA-1 names things here (fingerprints, config versions, change keys); it is not
a security boundary. The canonical JSON form (sorted keys, no spaces, ASCII) is part of
the ledger's contract: changing it renames every stored fingerprint (docs/design.md, invariant 1).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

SHORT_HEX_CHARS = 16


def text_hash(text: str, chars: int = SHORT_HEX_CHARS) -> str:
    """The first `chars` hex digits of the SHA-1 of `text`."""
    return hashlib.sha1(text.encode()).hexdigest()[:chars]


def canonical_json(payload: object) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def canonical_hash(payload: object, chars: int = SHORT_HEX_CHARS) -> str:
    """A digest of a JSON-able value that ignores key order and whitespace."""
    return text_hash(canonical_json(payload), chars)


def derived_seed(text: str) -> int:
    """A 31-bit seed derived from `text` (SHA-256: seeds, unlike names, must not collide)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") >> 1


def file_hash(path: Path) -> str:
    """The full SHA-1 of a file's bytes (traces, source files)."""
    return hashlib.sha1(path.read_bytes()).hexdigest()


def sha256_text(text: str) -> str:
    """The full SHA-256 of text: a source patch's identity, stored and compared in full."""
    return hashlib.sha256(text.encode()).hexdigest()
