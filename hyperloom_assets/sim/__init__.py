"""The sim engine: a serving engine with a physical performance model (see README.md)."""

from hyperloom_assets.sim.engine_args import harness_flags, split_harness_args

__all__ = ["harness_flags", "split_harness_args"]
