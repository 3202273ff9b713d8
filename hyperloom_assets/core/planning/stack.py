"""From keepers to a server: the composed stack as a launch spec. Pure code."""

from __future__ import annotations

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.measurement.serving import ServerSpec
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.registry import harness_flags_for
from hyperloom_assets.core.planning.variants import Composition, Variant, compose, strip_flags


def composition(target: Target, keepers: list[Variant]) -> Composition:
    """The operator's config with the keepers on top; harness flags never enter (docs/design.md, invariant 3)."""
    return compose(target.server_args, target.env, keepers, harness_flags_for(target.engine))


def stack_spec(target: Target, keepers: list[Variant], base: ServerSpec | None = None) -> ServerSpec:
    """What to launch for the operator's config with these keepers on top.

    `base` is the baseline's spec: the stack is served from the same interpreter (a
    release's environment on a release run).
    """
    stack = composition(target, keepers)
    return ServerSpec(engine=target.engine, model=target.model, server_args=stack.argv, env=stack.env,
                      unset_env=stack.unset_env, python=base.python if base else None)


def final_command(target: Target, launched: list[str]) -> list[str]:
    """The launched command without the harness's own flags (the sim's --gpu, the profiler's).

    The launcher's --model/--port/--host stay, so the command still names what it serves;
    a profiler flag the operator set stays too.
    """
    engine = engine_for(target.engine)
    ours = harness_flags_for(target.engine) - engine.launcher_flags()
    if engine.profiler is not None:  # the baseline's launch carries it (resources/profiling.py)
        ours |= engine.profiler.flags() - set(target.server_args)
    return strip_flags(launched, ours)
