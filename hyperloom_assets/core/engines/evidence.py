"""Launch evidence: what an engine says, in its own log, that it ran with. Pure code.

vLLM logs the arguments that differ from its defaults as a Python dict literal
(`non-default args: {...}`); SGLang logs its whole resolved configuration: as a dict
since its resolved records (`logger.info(f"server_args={...resolved_dict()}")` in
0.5.23's engine launcher), as the dataclass repr before
(`server_args=ServerArgs(...)`, from `logger.info(f"{server_args=}")`). All are read
with `ast`, never `eval`. A config object inside a record is logged as its dataclass
repr (vLLM: `'profiler_config': ProfilerConfig(profiler='torch', ...)` once a profiler
is configured) and is read as the dict of its fields. A record that is absent, cut off
or holds a value that is neither a literal nor such a repr gives None: "unknown", which
invariant 6 (docs/design.md) leaves alone; a partial record would be a guess (a dropped
`enable_prefix_caching: False` reads as "cache on").
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any

VLLM_MARKER = "non-default args: "
SGLANG_MARKER = "server_args=ServerArgs("
SGLANG_DICT_MARKER = "server_args={"


def _json_able(value: Any) -> Any:
    """The literal as JSON types; raises ValueError for what JSON cannot hold."""
    if isinstance(value, (tuple, list)):
        return [_json_able(item) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_json_able(item) for item in value), key=repr)
    if isinstance(value, dict):
        return {_json_key(key): _json_able(item) for key, item in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("non-finite float")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"not JSON-able: {type(value).__name__}")


def _json_key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (bool, int, float)) or key is None:
        return json.dumps(key)
    raise ValueError(f"dict key not JSON-able: {key!r}")


def _last_line_with(log_text: str, marker: str) -> str | None:
    """The text after the marker on the last line that has it (a restart logs it again)."""
    found = None
    for line in log_text.splitlines():
        at = line.find(marker)
        if at >= 0:
            found = line[at + len(marker) :]
    return found


def _value(node: ast.AST) -> Any:
    """A literal, or a dataclass repr `Name(field=literal, ...)` as the dict of its fields."""
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and not node.args:
        if any(keyword.arg is None for keyword in node.keywords):
            raise ValueError("** in a repr")
        return {keyword.arg: _value(keyword.value) for keyword in node.keywords}
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise ValueError("** in a dict")
        return {_json_key(_value(key)): _value(item) for key, item in zip(node.keys, node.values)}
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return _json_able([_value(item) for item in node.elts])
    return _json_able(ast.literal_eval(node))


def _dict_literal(literal: str | None) -> dict[str, Any] | None:
    if literal is None:
        return None
    try:
        parsed = _value(ast.parse(literal.strip(), mode="eval").body)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def parse_vllm_non_default_args(log_text: str) -> dict[str, Any] | None:
    """vLLM's `non-default args: {...}` record as a JSON-able dict, or None."""
    return _dict_literal(_last_line_with(log_text, VLLM_MARKER))


def parse_sglang_server_args(log_text: str) -> dict[str, Any] | None:
    """SGLang's resolved record, `server_args={...}` or `server_args=ServerArgs(...)`, as a dict, or None."""
    rest = _last_line_with(log_text, SGLANG_MARKER)
    if rest is None:
        mapping = _last_line_with(log_text, SGLANG_DICT_MARKER)
        return None if mapping is None else _dict_literal("{" + mapping)
    try:
        node = ast.parse("ServerArgs(" + rest.strip(), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(node, ast.Call) or node.args:
        return None
    fields: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            return None
        try:
            fields[keyword.arg] = _value(keyword.value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return fields
