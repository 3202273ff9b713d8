"""Source-patch candidates: the operator's patch files first, then the library's. Pure code.

Every patch is accuracy-risky (it changes the engine's code) and is launched on top of
the running best's tree; whether it applies there is `git apply --check`'s call at
trial time (REJECTED when it does not). A library patch is offered only when its
header claims the serving release and does not say `offer: no` (the corruptions kept
for the gate's tests and benchmark).
"""

from __future__ import annotations

import re

from hyperloom_assets.core.config.targets import Target
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.spec import EngineSpec
from hyperloom_assets.core.patches.library import offered_patches
from hyperloom_assets.core.patches.patch import SourcePatch, parse_patch, read_patch_file
from hyperloom_assets.core.planning.fingerprints import trial_fingerprint
from hyperloom_assets.core.planning.variants import Variant

LIBRARY_PATCH_SCORE = 150.0  # halved as risky: 75, after the sequence cap and CUDA graphs, before the token budget
RISKY_FACTOR = 0.5


def patch_variant(patch: SourcePatch, score: float) -> Variant:
    said = f"{patch.changes}. Why: {patch.why}. Risk: {patch.risk}" if patch.changes else patch.describe()
    return Variant(name=f"patch {patch.name}", provenance="patch", reason=f"[{patch.source} patch] {said}",
                   accuracy_risky=True, expected_value=score, patches=[patch])


def llm_patch(name: str, diff: str, spec: EngineSpec) -> SourcePatch:
    """A model's proposed diff as a source patch (`llm-<name>`); PatchError when it is not a diff."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return parse_patch(diff, f"llm-{slug}", "llm", spec, where=f"proposal {name!r}")


def operator_patches(target: Target) -> list[SourcePatch]:
    spec = engine_for(target.engine)
    return [read_patch_file(path, "operator", spec) for path in target.patches]


def patch_candidates(target: Target, identity: str | None, keepers: list[Variant], tried: set[str],
                     tried_patches: frozenset[str] = frozenset()) -> list[Variant]:
    """Operator patches (first: the operator asked for them), then the library's (not for a target
    that searches its own space only), none kept or tried.

    A patch is tried once per run (`tried_patches`, by sha256), whatever its outcome: one
    that failed the gate or did not apply is not offered again on top of a later keeper.
    """
    if target.framework_tree is None:
        return []
    kept = {patch.sha256 for keeper in keepers for patch in keeper.patches} | set(tried_patches)
    offered = [] if target.searches_only_its_space() else offered_patches(engine_for(target.engine), identity)
    library = [p for p in offered if p.offered]
    variants = [patch_variant(p, float("inf")) for p in operator_patches(target)]
    variants += [patch_variant(p, LIBRARY_PATCH_SCORE * RISKY_FACTOR) for p in library]
    return [v for v in variants if v.patches[0].sha256 not in kept and trial_fingerprint(keepers, v) not in tried]


def with_patches(plan: list[Variant], patches: list[Variant]) -> list[Variant]:
    """The plan with patch candidates merged in by score (operator patches, scored infinite, lead)."""
    merged = [*patches, *plan]
    return sorted(merged, key=lambda v: -v.expected_value)
