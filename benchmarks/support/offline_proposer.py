"""The product's proposer round (assets/proposer_round.py) inside the offline climb.

The round runs as `candidates` and `trials` run it: the same evidence payload (the
offline baseline's launch record and server telemetry, the roofline, the trials so far;
no profile: the offline climb has no profile asset), the same guard with the engine's
own parser run by a LocalHost (a subprocess that imports the parser, never a server),
the same critic, through the same LlmProviders and the SDKs' own variables. Its lines
go to a logger and its record to a list: no Dagster context and no result store.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from benchmarks.support.offline_climb import RoundEvidence
from hyperloom_assets.assets.proposer_round import RoundInputs, propose
from hyperloom_assets.core.decisions.climb import TrialRecord
from hyperloom_assets.core.planning.variants import Variant
from hyperloom_assets.core.proposer.record import ProposerRound
from hyperloom_assets.core.proposer.settings import ProposerField, ProposerSettings, resolve_settings
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.proposer.providers import LlmProviders

LOG = logging.getLogger("hyperloom.bench.proposer")


class OfflineProposer:
    """A model's rounds for one climb; `rounds` keeps each round's record with its calls."""

    def __init__(self, settings: ProposerSettings, providers: LlmProviders, host: LocalHost):
        self.settings, self.providers, self.host = settings, providers, host
        self.max_rounds = settings.max_rounds
        self.rounds: list[ProposerRound] = []
        self.approved: list[Variant] = []  # every round's approved variants, before the space narrows them

    @classmethod
    def from_field(cls, proposer: dict, providers: LlmProviders, state_dir: Path) -> OfflineProposer:
        """From a target's `proposer:` field, the environment filling what it leaves out, as for a target."""
        settings = resolve_settings(ProposerField.model_validate(proposer), os.environ)
        return cls(settings, providers, LocalHost(state_dir=str(state_dir), check_foreign_processes=False))

    def propose(self, round_no: int, evidence: RoundEvidence, keepers: list[Variant],
                trials: list[TrialRecord]) -> list[Variant]:
        inputs = RoundInputs(evidence.target, self.host, self.providers, evidence.baseline, evidence.roofline,
                             self.settings, None, log=LOG, observe=_unobserved, record=self.rounds.append)
        found = propose(inputs, round_no, trials=trials, keepers=keepers, tried=set())
        self.approved.extend(found)
        return found

    def summary(self) -> dict[str, int]:
        """What the climb asked of the model: calls, rounds, rounds the rule planner took over (and of
        those, the ones whose call failed, as against a reply that did not parse), approved variants."""
        return {"llm_calls": sum(len(r.calls) for r in self.rounds), "rounds": len(self.rounds),
                "rounds_fell_back": sum(r.fell_back for r in self.rounds),
                "calls_failed": sum(r.fell_back and r.calls[0].call_error is not None for r in self.rounds),
                "approved": len(self.approved)}


def _unobserved(key: str, value: Any) -> None:
    """No asset to observe: the round's record (with every call) is in `rounds`."""
