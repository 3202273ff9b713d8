"""The known engines: every module of this package that builds an EngineSpec named ENGINE. Pure code."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from types import MappingProxyType
from typing import Mapping

from hyperloom_assets.core.engines.spec import EngineSpec, MetricNames

PACKAGE = "hyperloom_assets.core.engines"


class UnknownEngine(ValueError):
    """An engine name no module of hyperloom_assets/core/engines/ defines."""


@functools.cache
def known_engines() -> Mapping[str, EngineSpec]:
    """Name -> spec, in the order users read them (vllm, sglang, atom, sim)."""
    package = importlib.import_module(PACKAGE)
    found = []
    for module_info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{PACKAGE}.{module_info.name}")
        spec = getattr(module, "ENGINE", None)
        if isinstance(spec, EngineSpec):
            found.append(spec)
    return MappingProxyType({spec.name: spec for spec in sorted(found, key=lambda s: s.listed_at)})


def engine_names() -> tuple[str, ...]:
    return tuple(known_engines())


def engine_for(name: str) -> EngineSpec:
    try:
        return known_engines()[name]
    except KeyError:
        raise UnknownEngine(f"unknown engine {name!r}; expected one of {', '.join(engine_names())}") from None


def speaking(name: str, server_args: list[str]) -> EngineSpec:
    """The engine whose flags and log lines a target speaks: a stand-in's flavor, else itself."""
    spec = engine_for(name)
    return engine_for(spec.flavor_of(server_args)) if spec.flavor_of else spec


def flavor_of(name: str, server_args: list[str]) -> str:
    return speaking(name, server_args).name


def grid_engine(name: str, flavor: str | None) -> str:
    """The engine whose seed grid plans for a target (a stand-in plans with its flavor's)."""
    spec = engine_for(name)
    return (flavor or spec.flavor_of([])) if spec.flavor_of else name


def harness_flags_for(name: str) -> frozenset[str]:
    """Flags that are the harness's, not the engine's: the launcher's, and a stand-in's own."""
    spec = engine_for(name)
    return spec.harness_flags | spec.launcher_flags()


def engine_flags_for(name: str, flavor: str | None) -> frozenset[str] | None:
    """The flags an engine is known to accept, where the project knows them (a stand-in's parser)."""
    spec = engine_for(name)
    return spec.accepted_flags_of(flavor) if spec.accepted_flags_of else None


def all_boolean_flags() -> frozenset[str]:
    """Flags that take no value, across every engine (argv reading does not know the engine)."""
    return frozenset().union(*(spec.boolean_flags for spec in known_engines().values()))


def all_multi_value_flags() -> frozenset[str]:
    return frozenset().union(*(spec.multi_value_flags for spec in known_engines().values()))


def metric_names() -> dict[str, MetricNames]:
    """Engine -> the `/metrics` series it exposes, for every engine that has them."""
    return {name: spec.metrics for name, spec in known_engines().items() if spec.metrics is not None}
