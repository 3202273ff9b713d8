"""What the project knows of each serving engine, one module per engine. Pure code.

Each module (vllm.py, sglang.py, atom.py, sim.py) builds one EngineSpec named ENGINE
(spec.py): its distributions and how to recognise the real package, how it starts,
where its package sits in a source checkout, its launch record and prefix-cache rule
(docs/design.md, invariant 6), its log markers and startup budget, the flags that are an accuracy risk,
the env-var prefixes it reads and its seed grid (grids/). The registry (registry.py)
finds every module that defines ENGINE; the resources, the planner, the guards and the
target schema read engines only through it.

Adding an engine means adding one module, its grid and its tests.
"""

from hyperloom_assets.core.engines.registry import UnknownEngine, engine_for, engine_names, known_engines, speaking

__all__ = ["UnknownEngine", "engine_for", "engine_names", "known_engines", "speaking"]
