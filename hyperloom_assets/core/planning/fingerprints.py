"""The one fingerprint function of the explore ledger (docs/design.md, invariant 1). Pure code.

A fingerprint names a change (args added, args removed, env set, env unset, source
patches by the sha256 of their text), never a variant's or a patch file's name, so a
renamed variant is still recognized as already tried. The ledger keys fingerprints by
a context (target, workload, engine identity, operator's base config): the same change
in a new context is tried afresh.
"""

from __future__ import annotations

from pathlib import Path

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.hashing import canonical_hash, file_hash
from hyperloom_assets.core.measurement.workloads import TraceError, default_num_prompts, default_warmups, read_trace
from hyperloom_assets.core.planning.variants import Variant, canonical_flag, merge_changes, split_args


def _argv_pairs(add_args: list[str]) -> list[list[str]]:
    # "Sorted argv tokens" means sorted flag/value pairs, not sorted raw tokens:
    # sorting the raw tokens of `--a 1 --b 2` and of `--a 2 --b 1` gives the same
    # list ["--a", "--b", "1", "2"], so two different configs would collide. Each
    # flag keeps its value; the pairs are sorted, so `--b 2 --a 1` agrees with
    # `--a 1 --b 2`. `--x=v` and `--x v` (and `_` for `-`) are the same pair.
    pairs = []
    for setting in split_args(add_args):
        flag = canonical_flag(setting.flag) if setting.flag else ""
        pairs.append([flag] if setting.value is None else [flag, setting.value])
    return sorted(pairs)


def fingerprint_change(add_args: list[str], set_env: dict[str, str], remove_args: list[str] | None = None,
                       unset_env: list[str] | None = None, args_mode: str | None = None,
                       patches: list[str] | None = None) -> str:
    """SHA-1 of the canonical JSON of a change; the first 16 hex chars."""
    payload: dict[str, object] = {
        "argv": _argv_pairs(add_args),
        "env": sorted([name, value] for name, value in set_env.items()),
    }
    # Present only when used, so a plain add/set change hashes the same everywhere.
    if remove_args:
        payload["remove_args"] = sorted(canonical_flag(f) for f in remove_args)
    if unset_env:
        payload["unset_env"] = sorted(unset_env)
    if args_mode:
        payload["args_mode"] = args_mode
    if patches:  # source patches by the sha256 of their text: a renamed patch is the same change
        payload["patches"] = sorted(patches)
    return canonical_hash(payload)


def variant_fingerprint(variant: Variant) -> str:
    """The fingerprint of a variant's change; its name, reason and score do not count."""
    return fingerprint_change(variant.add_args, variant.set_env, variant.remove_args, variant.unset_env,
                              patches=[patch.sha256 for patch in variant.patches])


def trial_fingerprint(keepers: list[Variant], variant: Variant) -> str:
    """The fingerprint of what a trial launches, relative to the operator's base.

    A variant tried on top of a stack of keepers is the stack's change plus its own,
    so a knob rejected on the baseline can be tried again once a keeper changes what
    binds (the token budget after the sequence cap is raised), and two routes to the
    same config share one fingerprint. With no keepers this is variant_fingerprint.
    """
    if not keepers:
        return variant_fingerprint(variant)
    return variant_fingerprint(merge_changes([*keepers, variant]))


# The operator's own config: the empty change. The climb's relaunches of it record no
# fingerprint (trials.py, baseline_beside.py); core/report/pareto.py reads them as this one.
BASELINE_FINGERPRINT = fingerprint_change([], {})


def config_fingerprint(keepers: list[Variant]) -> str:
    """The fingerprint of the config a stack of keepers launches, as the climb records it for a
    trial or relaunch of the same changes (trials.py); the baseline's for none."""
    return trial_fingerprint(keepers[:-1], keepers[-1]) if keepers else BASELINE_FINGERPRINT


def trace_sha1(path: Path) -> str:
    """The hash of a trace file's bytes; an unreadable file hashes as its absence."""
    try:
        return file_hash(path)
    except OSError:
        return f"unreadable:{path}"


def _agentic_prompts(trace: Path | None) -> int | None:
    if trace is None:
        return None
    try:
        return sum(len(session.turns) for session in read_trace(trace))
    except TraceError:
        return None


def workload_signature(workload: Workload, model: str | Path | None = None,
                       num_prompts: int | None = None, warmups: int | None = None) -> dict:
    """What a measurement's numbers depend on besides the server (docs/design.md, invariant 4)."""
    if num_prompts is None:
        if workload.kind == "agentic":
            num_prompts = _agentic_prompts(workload.trace)
        elif workload.isl is not None and workload.osl is not None:
            num_prompts = workload.num_prompts or default_num_prompts(workload.concurrency, workload.isl, workload.osl)
    return {
        "model": None if model is None else str(model),
        "kind": workload.kind,
        "concurrency": workload.concurrency,
        "isl": workload.isl,
        "osl": workload.osl,
        "prefix_len": workload.prefix_len,
        "trace_sha1": None if workload.trace is None else trace_sha1(workload.trace),
        "prompts": num_prompts,
        "warmups": default_warmups(workload.concurrency) if warmups is None else warmups,
        "seed": workload.seed,
        "request_rate": workload.request_rate,
    }


def context_key(target_name: str, workload_signature: dict, engine_identity: str, base_config_version: str) -> str:
    """The ledger context: a new commit, release or args edit starts a new one."""
    return canonical_hash({
        "target": target_name,
        "workload": workload_signature,
        "engine": engine_identity,
        "base_config": base_config_version,
    })
