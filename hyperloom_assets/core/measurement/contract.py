"""The workload contract: what every measurement of a target reuses. Pure code."""

from __future__ import annotations

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.models import Strict


class WorkloadContract(Strict):
    """What every measurement of a target reuses (docs/design.md, invariant 4), fixed by its baseline."""
    workload: Workload
    vocab_size: int
    max_model_len: int
    num_prompts: int | None  # None: agentic, the whole trace per round
    warmups: int
    repeats: int
