"""Workloads turned into request plans: exact token IDs, seeded, reproducible.

Pure code. A plan is a list of sessions; a session is a list of turns run in order.
Random and shared-prefix workloads are single-turn sessions; an agentic trace gives
multi-turn sessions whose prompts grow with the conversation.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pydantic import Field, PositiveInt, ValidationError

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.hashing import derived_seed, file_hash
from hyperloom_assets.core.models import Strict

# Token IDs below this are left alone: tokenizers put their special tokens first.
FIRST_ORDINARY_TOKEN = 16



class PlannedRequest(Strict):
    prompt_ids: list[int]
    output_tokens: int
    session_id: str | None = None
    turn: int = 0
    think_ms: float = 0.0
    cached_prefix_tokens: int = 0  # tokens an earlier turn of the session already sent


class TraceTurn(Strict):
    user_tokens: PositiveInt
    output_tokens: PositiveInt
    think_ms: float = Field(default=0, ge=0)


class TraceSession(Strict):
    session_id: str
    turns: list[TraceTurn] = Field(min_length=1)


class TraceError(ValueError):
    """A trace that cannot be replayed; the message names the file and line."""


def default_num_prompts(concurrency: int, isl: int, osl: int) -> int:
    """The reference's adaptive rule: more prompts per round for short requests."""
    total = isl + osl
    factor = 10 if total <= 1024 else 5 if total <= 4096 else 3 if total <= 16384 else 2
    return concurrency * factor


def default_warmups(concurrency: int, compiles_on_first_use: bool = False) -> int:
    """Requests in the discarded warm-up round: min(concurrency, 8), the reference's default;
    two full waves where the engine compiles each batch shape the first time it meets one,
    so the measured rounds do not pay for it (docs/design.md, measurement protocol step 4)."""
    return 2 * concurrency if compiles_on_first_use else min(concurrency, 8)


def read_trace(path: Path) -> list[TraceSession]:
    """Parse a JSONL trace; every problem names the file and the line."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace ({exc.strerror})") from exc
    sessions = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            sessions.append(TraceSession.model_validate(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}: line {number}: not JSON ({exc.msg})") from exc
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise TraceError(f"{path}: line {number}: {field}: {first['msg']}") from exc
    if not sessions:
        raise TraceError(f"{path}: the trace has no sessions")
    return sessions


def _tokens(rng: random.Random, count: int, vocab_size: int) -> list[int]:
    return [rng.randrange(FIRST_ORDINARY_TOKEN, vocab_size) for _ in range(count)]


def _single_turn(workload: Workload, count: int, vocab_size: int) -> list[list[PlannedRequest]]:
    rng = random.Random(workload.seed)
    assert workload.isl is not None and workload.osl is not None
    prefix_len = workload.prefix_len if workload.kind == "shared_prefix" else 0
    prefix = _tokens(rng, prefix_len, vocab_size)
    sessions = []
    for index in range(count):
        suffix = _tokens(rng, workload.isl - prefix_len, vocab_size)
        cached = prefix_len if index > 0 else 0
        request = PlannedRequest(prompt_ids=prefix + suffix, output_tokens=workload.osl, cached_prefix_tokens=cached)
        sessions.append([request])
    return sessions


def _agentic(trace: list[TraceSession], vocab_size: int, seed: int) -> list[list[PlannedRequest]]:
    rng = random.Random(seed)
    sessions = []
    for session in trace:
        history: list[int] = []
        turns = []
        for index, turn in enumerate(session.turns):
            prompt = history + _tokens(rng, turn.user_tokens, vocab_size)
            turns.append(PlannedRequest(prompt_ids=prompt, output_tokens=turn.output_tokens, session_id=session.session_id,
                                        turn=index, think_ms=turn.think_ms, cached_prefix_tokens=len(history)))
            # The answer is planned, not taken from the server, so every round and
            # every engine replays the same conversation.
            history = prompt + _tokens(rng, turn.output_tokens, vocab_size)
        sessions.append(turns)
    return sessions


def build_plan(workload: Workload, vocab_size: int, num_prompts: int | None = None) -> list[list[PlannedRequest]]:
    """The sessions of one round. num_prompts defaults to the adaptive rule."""
    if workload.kind == "agentic":
        assert workload.trace is not None
        return _agentic(read_trace(workload.trace), vocab_size, workload.seed)
    assert workload.isl is not None and workload.osl is not None
    count = num_prompts or workload.num_prompts or default_num_prompts(workload.concurrency, workload.isl, workload.osl)
    return _single_turn(workload, count, vocab_size)


Plan = list[list[PlannedRequest]]


def round_seed(seed: int, label: str) -> int:
    """A distinct, reproducible dataset seed per round.

    Every round sends fresh prompts: re-sending a round's prompts on the same hot
    server would turn the engine's prefix cache into a free speed-up for repeat 2.
    """
    return derived_seed(f"{seed}:{label}")


def round_plan(workload: Workload, label: str, vocab_size: int, num_prompts: int | None = None) -> Plan:
    """The plan of one round (a warm-up or a repeat), seeded by its label."""
    return build_plan(workload.model_copy(update={"seed": round_seed(workload.seed, label)}), vocab_size, num_prompts)


def warmup_plan(workload: Workload, vocab_size: int, count: int) -> Plan:
    """The first `count` requests of a plan of their own, whole sessions first."""
    if count <= 0:
        return []
    plan = round_plan(workload, "warmup", vocab_size, count if workload.kind != "agentic" else None)
    taken: Plan = []
    for session in plan:
        if count <= 0:
            break
        taken.append(session[:count])
        count -= len(taken[-1])
    return taken


def measurement_signature(workload: Workload, plan: Plan, warmups: int, vocab_size: int) -> dict[str, Any]:
    """What makes two measurements comparable: the workload, resolved, with the trace's hash."""
    signature = workload.model_dump(mode="json")
    signature.update(num_prompts=sum(len(s) for s in plan), warmups=warmups, vocab_size=vocab_size)
    if workload.trace is not None:
        signature["trace_sha1"] = file_hash(workload.trace)
    return signature


def theoretical_prefix_hit_pct(plan: list[list[PlannedRequest]]) -> float:
    """Share of input tokens that an earlier turn of the same session already sent."""
    total = sum(len(r.prompt_ids) for s in plan for r in s)
    cached = sum(r.cached_prefix_tokens for s in plan for r in s if r.session_id is not None)
    return 100.0 * cached / total if total else 0.0


def max_context_tokens(plan: list[list[PlannedRequest]]) -> int:
    """The longest prompt plus its output: what must fit the server's max model length."""
    return max((len(r.prompt_ids) + r.output_tokens for s in plan for r in s), default=0)


def mean_context_tokens(plan: list[list[PlannedRequest]]) -> float:
    """Mean tokens in context over a request's decode: prompt plus half the output."""
    requests = [r for s in plan for r in s]
    if not requests:
        return 0.0
    return sum(len(r.prompt_ids) + r.output_tokens / 2 for r in requests) / len(requests)


def synthetic_trace(sessions: int, turns: int, first_user_tokens: int, user_tokens: int,
                    output_tokens: int, think_ms: float, seed: int) -> list[TraceSession]:
    """A synthetic agentic trace: a long first turn (system prompt, tools), short follow-ups."""
    rng = random.Random(seed)
    result = []
    for index in range(sessions):
        items = []
        for turn in range(turns):
            base = first_user_tokens if turn == 0 else user_tokens
            jitter = max(1, int(base * rng.uniform(0.75, 1.25)))
            items.append(TraceTurn(user_tokens=jitter, output_tokens=output_tokens, think_ms=0 if turn == 0 else think_ms))
        result.append(TraceSession(session_id=f"s{index + 1}", turns=items))
    return result


def write_trace(trace: list[TraceSession], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(s.model_dump_json() + "\n" for s in trace))
