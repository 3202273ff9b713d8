"""Each reply schema, as each SDK will send it, against that provider's structured-output rules.

The schemas are taken from the SDKs' own code paths: `anthropic.transform_schema` (what
resources/proposer/providers.py sends as `output_config.format`) and the openai SDK's
`response_format` for `chat.completions.parse` (sent with `"strict": true`). A model with
an open mapping is the control: the rules must catch the shape the replies once had.
"""

from __future__ import annotations

import anthropic
import pydantic
import pytest
from openai.lib._parsing._completions import type_to_response_format_param

from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.proposer.replies import CriticReply, ProposerReply
from tests.proposer.provider_rules import anthropic_violations, dropped_fields, openai_strict_violations


def openai_sent(model: type[pydantic.BaseModel]) -> dict:
    param = type_to_response_format_param(model)
    assert param["json_schema"]["strict"] is True, "the SDK asks for strict mode"
    return param["json_schema"]["schema"]


class OpenMapping(Strict):
    env: dict[str, str]


@pytest.mark.parametrize("reply", [ProposerReply, CriticReply])
def test_each_reply_schema_passes_both_providers_rules_and_keeps_every_field(reply) -> None:
    model_schema = reply.model_json_schema()
    assert openai_strict_violations(openai_sent(reply)) == []
    assert anthropic_violations(anthropic.transform_schema(reply)) == []
    assert dropped_fields(model_schema, openai_sent(reply)) == []
    assert dropped_fields(model_schema, anthropic.transform_schema(reply)) == []


def test_the_rules_catch_an_open_mapping_on_both_sides() -> None:
    refused = openai_strict_violations(openai_sent(OpenMapping))
    assert refused and "'additionalProperties' is required to be supplied and to be false" in refused[0]
    assert anthropic_violations(anthropic.transform_schema(OpenMapping)) == [], "Anthropic accepts it..."
    assert dropped_fields(OpenMapping.model_json_schema(), anthropic.transform_schema(OpenMapping)) == [
        "properties/env: an open mapping sent as an object that holds no key"], "...closed to hold nothing"


def test_the_rules_name_what_each_provider_refuses() -> None:
    no_required = {"type": "object", "additionalProperties": False, "properties": {"a": {"type": "string"}}}
    assert "Missing 'a'" in openai_strict_violations(no_required)[0]
    assert openai_strict_violations({"anyOf": [no_required]}) == ["the root schema must be an object, not anyOf"]
    negated = {**no_required, "required": ["a"], "properties": {"a": {"type": "string", "not": {"const": "x"}}}}
    assert "'not' is not permitted" in openai_strict_violations(negated)[0]
    bounded = {"type": "object", "additionalProperties": False, "required": ["n"],
               "properties": {"n": {"type": "integer", "minimum": 1}}}
    assert openai_strict_violations(bounded) == [], "OpenAI takes numeric bounds"
    assert "'minimum' is not supported" in anthropic_violations(bounded)[0], "Anthropic does not"
    open_object = {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}
    assert "additionalProperties must be false" in anthropic_violations(open_object)[0]
