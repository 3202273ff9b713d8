"""Request plans and the bad inputs a benchmark must refuse before sending anything."""

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from hyperloom_assets.assets.workload_contract import workload_contract
from hyperloom_assets.core.config.targets import Slo, Target, Workload
from hyperloom_assets.core.measurement.workloads import (
    FIRST_ORDINARY_TOKEN,
    TraceError,
    build_plan,
    default_num_prompts,
    default_warmups,
    max_context_tokens,
    read_trace,
    synthetic_trace,
    theoretical_prefix_hit_pct,
    write_trace,
)
from tests.conftest import SIM_MODEL

EXAMPLE_TRACE = Path(__file__).resolve().parents[2] / "examples" / "agentic_small.jsonl"


def _trace(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_missing_trace_names_the_file(tmp_path):
    with pytest.raises(TraceError, match="nope.jsonl: cannot read trace"):
        read_trace(tmp_path / "nope.jsonl")


def test_empty_trace_is_refused(tmp_path):
    with pytest.raises(TraceError, match="trace.jsonl: the trace has no sessions"):
        read_trace(_trace(tmp_path, ["", "  "]))


def test_malformed_line_names_file_and_line(tmp_path):
    good = json.dumps({"session_id": "s1", "turns": [{"user_tokens": 4, "output_tokens": 2}]})
    with pytest.raises(TraceError, match=r"trace.jsonl: line 2: not JSON"):
        read_trace(_trace(tmp_path, [good, "{not json"]))


@pytest.mark.parametrize("field,value", [("user_tokens", 0), ("output_tokens", -3)])
def test_turn_with_no_tokens_is_refused(tmp_path, field, value):
    turn = {"user_tokens": 4, "output_tokens": 2, field: value}
    line = json.dumps({"session_id": "s1", "turns": [turn]})
    with pytest.raises(TraceError, match=rf"line 1: turns\.0\.{field}"):
        read_trace(_trace(tmp_path, [line]))


def test_unknown_trace_field_is_refused(tmp_path):
    line = json.dumps({"session_id": "s1", "turns": [{"user_tokens": 4, "output_tokens": 2, "colour": 1}]})
    with pytest.raises(TraceError, match="line 1"):
        read_trace(_trace(tmp_path, [line]))


def test_slo_with_unknown_key_is_refused():
    with pytest.raises(ValidationError, match="ttft_p99_ms"):
        Slo.model_validate({"ttft_ms": 100, "ttft_p99_ms": 5})
    with pytest.raises(ValidationError):
        Slo(ttft_ms=0)  # a target of zero ms is no target


def test_random_plan_is_seeded_and_exact():
    workload = Workload(kind="random", isl=32, osl=8, concurrency=2, num_prompts=5, seed=4)
    plan = build_plan(workload, vocab_size=100)
    assert len(plan) == 5 and all(len(s) == 1 for s in plan)
    assert all(len(s[0].prompt_ids) == 32 and s[0].output_tokens == 8 for s in plan)
    assert all(FIRST_ORDINARY_TOKEN <= t < 100 for s in plan for t in s[0].prompt_ids)
    assert plan == build_plan(workload, vocab_size=100)
    assert plan != build_plan(workload.model_copy(update={"seed": 5}), vocab_size=100)


def test_shared_prefix_plan_shares_the_prefix():
    workload = Workload(kind="shared_prefix", isl=20, osl=4, prefix_len=12, concurrency=1, num_prompts=3)
    plan = build_plan(workload, vocab_size=1000)
    prefixes = {tuple(s[0].prompt_ids[:12]) for s in plan}
    assert len(prefixes) == 1
    assert [s[0].cached_prefix_tokens for s in plan] == [0, 12, 12]


def test_agentic_plan_grows_the_conversation(tmp_path):
    line = json.dumps({"session_id": "a", "turns": [{"user_tokens": 10, "output_tokens": 5},
                                                    {"user_tokens": 4, "output_tokens": 3, "think_ms": 7}]})
    workload = Workload(kind="agentic", trace=_trace(tmp_path, [line]), concurrency=1)
    (first, second), = build_plan(workload, vocab_size=500)
    assert len(first.prompt_ids) == 10 and len(second.prompt_ids) == 19  # 10 + 5 answer + 4 new
    assert second.prompt_ids[:10] == first.prompt_ids and second.cached_prefix_tokens == 15
    assert second.think_ms == 7 and second.turn == 1
    plan = build_plan(workload, vocab_size=500)
    assert theoretical_prefix_hit_pct(plan) == pytest.approx(100 * 15 / 29)
    assert max_context_tokens(plan) == 22


def test_example_trace_fits_a_4096_context_model():
    sessions = read_trace(EXAMPLE_TRACE)
    assert len(sessions) == 8 and all(len(s.turns) == 4 for s in sessions)
    plan = build_plan(Workload(kind="agentic", trace=EXAMPLE_TRACE, concurrency=4), vocab_size=2048)
    assert max_context_tokens(plan) <= 4096
    assert theoretical_prefix_hit_pct(plan) > 50


def test_synthetic_trace_round_trips(tmp_path):
    trace = synthetic_trace(3, 2, first_user_tokens=100, user_tokens=10, output_tokens=5, think_ms=4, seed=1)
    write_trace(trace, tmp_path / "t.jsonl")
    assert read_trace(tmp_path / "t.jsonl") == trace


def test_defaults_follow_the_reference_rule():
    assert default_num_prompts(4, 512, 512) == 40
    assert default_num_prompts(4, 2048, 512) == 20
    assert default_num_prompts(4, 8192, 512) == 12
    assert default_num_prompts(4, 16384, 512) == 8
    assert default_warmups(3) == 3 and default_warmups(64) == 8


def test_an_engine_that_compiles_on_first_use_warms_up_with_two_full_waves():
    assert default_warmups(16, compiles_on_first_use=True) == 32 and default_warmups(3, compiles_on_first_use=True) == 6


@pytest.mark.parametrize("engine, warmups", [("vllm", 32), ("sim", 8), ("sglang", 8)])
def test_the_workload_contract_warms_up_by_the_engines_rule(engine, warmups):
    target = Target(engine=engine, model=SIM_MODEL, server_args=[],
                    workload=Workload(kind="random", isl=64, osl=64, concurrency=16))
    assert workload_contract(target).warmups == warmups
