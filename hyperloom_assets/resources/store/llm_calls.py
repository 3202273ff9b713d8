"""Every model call and every proposal round, in the result store's database.

One row per call (provider, model, prompt version, messages, reply text, tokens,
latency, cost where known) and one per round (the proposals' fates and whether the
rule planner took over), keyed by target and run. The tables are created on first use.
Each row is redacted as it is written (core/secrets.py), as the result store's are: the
prompts hold no secret of the target already, and none of this process's gets in either.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import sqlalchemy as sa

from hyperloom_assets.core.proposer.record import LlmCall, ProposerRound
from hyperloom_assets.core.secrets import Redactor
from hyperloom_assets.resources.store.database import ExtraTables

METADATA = sa.MetaData()

LLM_CALLS = sa.Table(
    "llm_calls", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("target", sa.String, nullable=False, index=True),
    sa.Column("run_id", sa.String),
    sa.Column("round", sa.Integer, nullable=False),
    sa.Column("role", sa.String, nullable=False),  # proposer | critic
    sa.Column("provider", sa.String, nullable=False),
    sa.Column("model", sa.String, nullable=False),
    sa.Column("prompt_version", sa.String, nullable=False),
    sa.Column("messages", sa.Text, nullable=False),  # JSON list of {role, content}
    sa.Column("reply_text", sa.Text),
    sa.Column("parsed", sa.Text),  # JSON: the reply as the schema read it, null when it did not parse
    sa.Column("parse_error", sa.Text),
    sa.Column("call_error", sa.Text),
    sa.Column("tokens_in", sa.Integer),
    sa.Column("tokens_out", sa.Integer),
    sa.Column("latency_s", sa.Float, nullable=False),
    sa.Column("cost_usd", sa.Float),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

PROPOSER_ROUNDS = sa.Table(
    "proposer_rounds", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("target", sa.String, nullable=False, index=True),
    sa.Column("run_id", sa.String),
    sa.Column("round", sa.Integer, nullable=False),
    sa.Column("record", sa.Text, nullable=False),  # JSON ProposerRound without its calls (they have their rows)
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)


class LlmCallLog(ExtraTables):
    metadata = METADATA

    def record_round(self, target: str, run_id: str | None, record: ProposerRound) -> None:
        now = datetime.now(timezone.utc)
        with self.writing(f"proposer round {record.round} of {target}") as conn:
            for call in record.calls:
                conn.execute(_call_row(target, run_id, call, now))
            kept = record.model_dump(mode="json", exclude={"calls"})
            conn.execute(PROPOSER_ROUNDS.insert().values(
                target=target, run_id=run_id, round=record.round,
                record=json.dumps(Redactor.within(kept, os.environ).value(kept, exact=True)), created_at=now))

    def record_call(self, target: str, run_id: str | None, call: LlmCall) -> None:
        """A call outside a proposer round: the critic's review of a planned patch in the climb."""
        with self.writing(f"{call.role} call of {target}") as conn:
            conn.execute(_call_row(target, run_id, call, datetime.now(timezone.utc)))

    def calls(self, target: str) -> list[LlmCall]:
        query = sa.select(LLM_CALLS).where(LLM_CALLS.c.target == target).order_by(LLM_CALLS.c.id)
        with self.engine().connect() as conn:
            rows = [dict(row._mapping) for row in conn.execute(query)]
        fields = set(LlmCall.model_fields)
        return [LlmCall.model_validate({**{k: v for k, v in row.items() if k in fields},
                                        "messages": json.loads(row["messages"]),
                                        "parsed": json.loads(row["parsed"]) if row["parsed"] else None}) for row in rows]

    def rounds(self, target: str) -> list[dict]:
        query = sa.select(PROPOSER_ROUNDS).where(PROPOSER_ROUNDS.c.target == target).order_by(PROPOSER_ROUNDS.c.id)
        with self.engine().connect() as conn:
            return [json.loads(row.record) for row in conn.execute(query)]


def _call_row(target: str, run_id: str | None, call: LlmCall, now: datetime):
    secrets = Redactor.of(environ=os.environ)
    texts = {field: secrets.known(getattr(call, field)) if getattr(call, field) is not None else None
             for field in ("reply_text", "parse_error", "call_error")}
    return LLM_CALLS.insert().values(
        target=target, run_id=run_id, **{**call.model_dump(mode="json", exclude={"messages", "parsed"}), **texts},
        messages=json.dumps([{**m.model_dump(), "content": secrets.known(m.content)} for m in call.messages]),
        parsed=json.dumps(call.parsed) if call.parsed is not None else None, created_at=now)
