"""The planner on a KV-bound sim through the graph: it diagnoses from the server's telemetry
and spends its first trials on KV capacity, never on a sequence cap; the trials table
shows the telemetry each trial's launch reported."""

from __future__ import annotations

import dagster as dg
import yaml

from hyperloom_assets.definitions import build_defs
from tests.conftest import REPO

QWEN_32B = REPO / "models" / "qwen2.5-32b"
KV_FAMILIES = ("drop --no-enable-prefix-caching", "gpu-memory-utilization", "fp8-kv", "block-size")


def kv_only(name: str) -> bool:
    """A trial's name, or each part of a combined one, is a KV-capacity knob."""
    return all(part.startswith(KV_FAMILIES) for part in name.removeprefix("combined: ").split(" + "))


def test_a_kv_bound_baseline_tries_kv_capacity_before_any_sequence_cap(tmp_path, host, store) -> None:
    folder = tmp_path / "targets"
    folder.mkdir()
    # A 32B in bf16 on one 80 GB H100: about 6 GB of KV for 32 prompts sharing 768 of
    # their 1024 tokens, served with the prefix cache off.
    (folder / "kv.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(QWEN_32B),
        "server_args": ["--gpu", "H100", "--time-scale", "20", "--no-enable-prefix-caching", "--max-model-len", "4096"],
        "workload": {"kind": "shared_prefix", "isl": 1024, "prefix_len": 768, "osl": 64, "concurrency": 32,
                     "num_prompts": 64},
        "repeats": 2, "max_trials": 3, "target_gain_pct": 1000}))
    defs = build_defs(folder, host=host, store=store)
    selection = [dg.AssetKey(k) for k in ("baseline", "roofline", "profile", "candidates", "trials")]
    with dg.instance_for_test() as instance:
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            partition_key="kv", instance=instance, asset_selection=selection)
        assert result.success
        plan = result.asset_value("candidates")
        climb = result.asset_value("trials").climb
        table = instance.fetch_materializations(dg.AssetKey("trials"), limit=1).records[0] \
            .asset_materialization.metadata["trials"].value
    names = [v.name for v in plan]
    caps = [i for i, n in enumerate(names) if n.startswith("max-num-seqs")]
    kv = [i for i, n in enumerate(names) if n.startswith(KV_FAMILIES)]
    assert kv and caps and max(kv) < min(caps), names
    singles = [v for v in plan if v.provenance != "combined"]
    assert singles[0].diagnosis == "kv_capacity" and "KV cache" in singles[0].reason
    # First the KV knobs together (planning/combine.py), then one at a time: never a cap.
    assert plan[0].provenance == "combined" and kv_only(plan[0].name), plan[0].name
    # Every trial planned while KV capacity bound is a KV knob; a cap only once the
    # keepers' telemetry names another bottleneck.
    under_kv = [t.name for t in climb.trials if t.variant.diagnosis == "kv_capacity"]
    assert under_kv and climb.trials[0].name == under_kv[0] and all(kv_only(n) for n in under_kv), under_kv
    row = table.records[0].data
    assert row["diagnosis"] == "kv_capacity" and row["rule"] == climb.trials[0].variant.rule
    assert row["kv_usage_max_pct"] is not None and row["running_mean"] > 0 and row["prefix_hit_pct"] > 50, row
