"""The search-quality benchmark's proposer column: planner+history with a model's rounds first.

One ProposerColumn a benchmark run, named `proposer:<label>`:
- `vllm-tiny`: vLLM CPU serving the tiny random Llama for the whole run (the floor: its
  replies are noise, so its rounds fall back to the rule plan or propose what the guard,
  the critic or the space refuses);
- `scripted`: a fresh ScriptedLlm a climb (an in-process HTTP thread, no engine) whose
  one proposal is the best point of the space one proposal can reach, with an approving
  critic: an oracle that knows the truths, not a model;
- `real`: a provider's model through its SDK's own variables (ANTHROPIC_API_KEY,
  OPENAI_API_KEY, *_BASE_URL), never read here.
`climb(space)` yields the OfflineProposer one climb asks.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from benchmarks.support.llm_servers import LlmServer, environment, scripted, vllm_tiny
from benchmarks.support.offline_proposer import OfflineProposer
from benchmarks.support.search_space import Space
from hyperloom_assets.core.planning.stack import composition
from hyperloom_assets.core.planning.variants import (
    Variant,
    canonical_flag,
    effective_settings,
    setting_key,
    split_args,
)
from hyperloom_assets.resources.proposer.providers import LlmProviders
from hyperloom_assets.sim.engine_args import split_harness_args
from tests.proposer.proposals import APPROVE, change

KINDS = ("vllm-tiny", "scripted", "real")
MAX_ROUNDS = 2  # as benchmarks/proposer_sim.py: the first plan and the re-plan after the first keeper
ORACLE_RATIONALE = "the best configuration of this space that one change can reach (a scripted oracle)"


def oracle_args(space: Space) -> list[str] | None:
    """The best point one change reaches (within the SLO, under one): the engine args it sets otherwise than the
    operator, on top of hers."""
    target = space.scenario.target()
    operator = effective_settings(target.server_args)
    by_key = dict(zip(space.keys, space.points))
    ranked = sorted(((m.output_throughput, key) for key, m in space.truth.items() if space.feasible(key)), reverse=True)
    for _, key in ranked:
        if key not in by_key:
            continue
        _, engine_args = split_harness_args(by_key[key], space.scenario.flavor)
        changed = [token for setting in split_args(engine_args) if setting.flag and operator.get(
            setting_key(setting.flag)) != (canonical_flag(setting.flag), setting.value) for token in setting.tokens]
        reached = composition(target, [Variant(name="oracle", add_args=changed, provenance="llm", reason="")])
        if changed and space.key(reached.argv) == key:
            return changed
    return None


def oracle_script(space: Space) -> dict[str, list[str]]:
    """Round 1: the oracle's one change (none where no point is reachable); later rounds: nothing."""
    args = oracle_args(space)
    first = [change("the space's best reachable point", args, rationale=ORACLE_RATIONALE)] if args else []
    return {"proposer": [json.dumps({"proposals": first}), json.dumps({"proposals": []})], "critic": [APPROVE]}


class ProposerColumn:
    def __init__(self, kind: str, provider: str | None = None, model: str | None = None,
                 max_rounds: int = MAX_ROUNDS):
        if kind not in KINDS:
            raise ValueError(f"a proposer column is one of {KINDS}, got {kind!r}")
        if kind == "real" and not (provider and model):
            raise ValueError("a real proposer needs a provider and a model")
        self.kind, self.provider, self.model, self.max_rounds = kind, provider, model, max_rounds
        self._stack = ExitStack()
        self._server: LlmServer | None = None
        self._oracles: dict[str, dict[str, list[str]]] = {}
        self._folder: Path | None = None

    @property
    def name(self) -> str:
        return "proposer:" + (f"{self.provider}/{self.model}" if self.kind == "real" else self.kind)

    def describe(self) -> dict:
        """What the JSON says of the column besides its numbers (once entered: the served model's name)."""
        server = self._server.proposer if self._server else {}
        return {"kind": self.kind, "provider": self.provider or "openai",
                "model": self.model or server.get("model") or "scripted-oracle", "max_rounds": self.max_rounds,
                "max_tokens": self._server.max_tokens if self._server else LlmProviders().max_tokens,
                "base": "planner+history",
                "what": "planner+history with the model's approved proposals ahead of the rule plan: round 1 on "
                        "the first plan, another after each keeper up to max_rounds; a model call is not a launch"}

    def __enter__(self) -> ProposerColumn:
        self._folder = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="sq-proposer-")))
        if self.kind == "vllm-tiny":
            self._server = self._stack.enter_context(vllm_tiny(self._folder))
            self._stack.enter_context(environment(self._server.env))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    @contextmanager
    def climb(self, space: Space) -> Iterator[OfflineProposer]:
        """The proposer of one climb of this space; for `scripted`, its own server from round 1."""
        if self.kind == "real":
            yield self._proposer({"provider": self.provider, "model": self.model}, LlmProviders())
        elif self.kind == "vllm-tiny":
            yield self._proposer(self._server.proposer, LlmProviders(max_tokens=self._server.max_tokens))
        else:
            script = self._oracles.setdefault(space.scenario.name, oracle_script(space))
            with scripted(script) as server, environment(server.env):
                yield self._proposer(server.proposer, LlmProviders(max_tokens=server.max_tokens))

    def _proposer(self, proposer: dict, providers: LlmProviders) -> OfflineProposer:
        return OfflineProposer.from_field({**proposer, "max_rounds": self.max_rounds}, providers,
                                          self._folder / "host-state")
