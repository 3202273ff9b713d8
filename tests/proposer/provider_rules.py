"""The providers' documented structured-output rules, as checks over a JSON schema.

What each API refuses before a model sees the request, written from the providers' docs:

- OpenAI, `response_format` with `"strict": true` ("Supported schemas" in the Structured
  Outputs guide): the root is an object; every object sets `additionalProperties: false`
  and lists every property in `required`; only the supported keywords (no `allOf`, `not`,
  `if`/`then`/`else`, `patternProperties`, `dependentRequired`, `dependentSchemas`); at
  most 10 levels of nesting.
- Anthropic, `output_config.format` ("JSON Schema limitations" in the Structured outputs
  guide): `additionalProperties` only `false`; no numerical constraints (`minimum`,
  `maximum`, `multipleOf`, ...), no string length constraints, `minItems` only 0 or 1; no
  recursive schema; string formats from its list.

`dropped_fields` is the check no API makes: a field of the reply model that the schema as
sent can no longer hold (an open mapping closed to an object without properties).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

OPENAI_KEYWORDS = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "anyOf", "enum", "const", "$ref", "$defs",
    "description", "title", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minItems", "maxItems", "default"})
OPENAI_MAX_DEPTH = 10
ANTHROPIC_DENIED = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
                              "minLength", "maxLength", "maxItems", "uniqueItems", "patternProperties", "not",
                              "if", "then", "else", "dependentRequired", "dependentSchemas"})
ANTHROPIC_FORMATS = frozenset({"date-time", "time", "date", "duration", "email", "hostname", "uri", "ipv4", "ipv6",
                               "uuid", "text"})


def _nodes(schema: dict[str, Any], path: tuple = (), depth: int = 0) -> Iterator[tuple[tuple, int, dict]]:
    """Every subschema with its path (OpenAI's `context=(...)`) and its object nesting depth."""
    yield path, depth, schema
    nested = depth + (schema.get("type") == "object")
    for name, sub in (schema.get("properties") or {}).items():
        yield from _nodes(sub, (*path, "properties", name), nested)
    for name, sub in (schema.get("$defs") or {}).items():
        yield from _nodes(sub, (*path, "$defs", name), depth)
    if isinstance(schema.get("items"), dict):
        yield from _nodes(schema["items"], (*path, "items"), depth)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], (*path, "additionalProperties"), nested)
    for key in ("anyOf", "allOf", "oneOf"):
        for index, sub in enumerate(schema.get(key) or []):
            yield from _nodes(sub, (*path, key, index), depth)


def openai_strict_violations(schema: dict[str, Any]) -> list[str]:
    """Why OpenAI's strict mode refuses the schema, in its own words' shape; empty: accepted."""
    if schema.get("type") != "object":
        return ["the root schema must be an object, not anyOf"]
    problems = []
    for path, depth, node in _nodes(schema):
        where = f"In context={path}"
        unsupported = sorted(set(node) - OPENAI_KEYWORDS)
        if unsupported:
            problems.append(f"{where}, '{unsupported[0]}' is not permitted.")
        if depth > OPENAI_MAX_DEPTH:
            problems.append(f"{where}, the schema nests more than {OPENAI_MAX_DEPTH} levels.")
        if node.get("type") != "object":
            continue
        if node.get("additionalProperties") is not False:
            problems.append(f"{where}, 'additionalProperties' is required to be supplied and to be false.")
        missing = sorted(set(node.get("properties") or {}) - set(node.get("required") or []))
        if missing:
            problems.append(f"{where}, 'required' is required to be supplied and to be an array including "
                            f"every key in properties. Missing '{missing[0]}'.")
    return problems


def anthropic_violations(schema: dict[str, Any]) -> list[str]:
    """Why the Messages API refuses the schema as an `output_config.format`; empty: accepted."""
    problems = []
    for path, _, node in _nodes(schema):
        where = "/".join(map(str, path)) or "(root)"
        denied = sorted(set(node) & ANTHROPIC_DENIED)
        if denied:
            problems.append(f"{where}: '{denied[0]}' is not supported in output_config.format schemas")
        if node.get("type") == "object" and node.get("additionalProperties", False) is not False:
            problems.append(f"{where}: additionalProperties must be false for object types")
        if node.get("minItems", 0) not in (0, 1):
            problems.append(f"{where}: minItems only 0 or 1 is supported")
        if node.get("type") == "string" and node.get("format", "text") not in ANTHROPIC_FORMATS:
            problems.append(f"{where}: string format {node['format']!r} is not supported")
        ref = node.get("$ref", "")
        if ref and path and ref.removeprefix("#/$defs/") in path:
            problems.append(f"{where}: recursive schemas are not supported")
    return problems


def dropped_fields(model_schema: dict[str, Any], sent: dict[str, Any]) -> list[str]:
    """Fields of the reply model (its pydantic schema) that the schema as sent cannot hold."""
    dropped = []
    for path, _, node in _nodes(model_schema):
        if node.get("type") != "object":
            continue
        there = _at(sent, path)
        if there is None:
            dropped.append("/".join(map(str, path)) or "(root)")
            continue
        if isinstance(node.get("additionalProperties"), dict) and not there.get("properties") \
                and there.get("additionalProperties") is False:
            dropped.append("/".join(map(str, path)) + ": an open mapping sent as an object that holds no key")
        dropped += ["/".join(map(str, (*path, key))) for key in node.get("properties") or {}
                    if key not in (there.get("properties") or {})]
    return dropped


def _at(schema: dict[str, Any], path: tuple) -> dict[str, Any] | None:
    node: Any = schema
    for step in path:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return None
    return node if isinstance(node, dict) else None
