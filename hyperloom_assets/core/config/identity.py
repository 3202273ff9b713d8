"""Data versions of the observed inputs: a target's serving config. Pure code.

The engine's identity (git tree or installed release) needs the outside world and lives
in resources/releases/identity.py; both feed the ledger context of invariant 1 (docs/design.md).
"""

from __future__ import annotations

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.hashing import canonical_hash

# The fields that change what is served or measured; host, budgets and sweep do not.
SERVING_FIELDS = ("engine", "model", "server_args", "env", "workload")


def server_config_version(target: Target) -> str:
    """A hash of the target's serving fields: an edit makes its baseline stale."""
    fields = target.model_dump(mode="json", include=set(SERVING_FIELDS))
    if target.objective == "goodput":
        # Goodput counts requests against the SLO's limits as they are measured, so a launch
        # measured under other limits, or for throughput, is not evidence here. The default
        # objective adds nothing, so earlier targets keep their versions.
        fields["objective"] = {"goodput": target.slo.goodput().model_dump(mode="json")}
    return canonical_hash(fields)
