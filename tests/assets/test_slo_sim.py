"""A target's latency SLO through a whole run on the sim: enough prompts per launch for the
percentile's bound (said in the run), and the SLO verdict with its percentiles and bounds on
the baseline and on the validated stack."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from hyperloom_assets.definitions import build_defs
from tests.conftest import SIM_MODEL


def test_the_baseline_and_the_stack_carry_the_slo_verdict(tmp_path, host, store) -> None:
    folder = tmp_path / "targets"
    folder.mkdir()
    (folder / "sim.yaml").write_text(yaml.safe_dump({
        "engine": "sim", "model": str(SIM_MODEL),
        "server_args": ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4"],
        "workload": {"kind": "random", "isl": 128, "osl": 16, "concurrency": 16, "num_prompts": 16},
        "repeats": 2, "max_trials": 1, "target_gain_pct": 1000, "profile": False, "sweep_concurrencies": [16],
        "search_space": {"args": {"--max-num-seqs": [16]}, "only": True},
        # Generous limits (simulated H100 ms): both configs meet them; the verdict's rules are unit-tested.
        "slo": {"ttft_ms": 60000, "e2e_ms": 120000, "percentile": 95}}))
    defs = build_defs(folder, host=host, store=store)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("optimize_job").execute_in_process(partition_key="sim", instance=instance)
        assert result.success
        base = instance.fetch_materializations(dg.AssetKey("baseline"), limit=1).records[0].asset_materialization
        stack = instance.fetch_materializations(dg.AssetKey("optimization_stack"), limit=1).records[0] \
            .asset_materialization
        report = instance.fetch_materializations(dg.AssetKey("final_report"), limit=1).records[0] \
            .asset_materialization
        logs = [e.message for e in instance.all_logs(result.run_id) if e.user_message]
    contract = result.asset_value("baseline").contract
    assert contract.num_prompts == 30, "16 asked, 30 per round so that 2 rounds give a p95 bound its 59 requests"
    assert contract.workload.slo.ttft_ms == 60000, "each round's goodput counts under the SLO"
    assert any("slo: 30 prompts per round (60 per launch over 2 repeats)" in m for m in logs)
    verdict = base.metadata["slo"].value
    assert verdict["met"] is True and verdict["percentile"] == 95 and verdict["launches"] == 1, verdict
    assert 0 < verdict["ttft_ms"] <= verdict["ttft_upper_ms"] <= 60000 and verdict["tpot_ms"] is None, verdict
    assert base.metadata["latency"].value["ttft_ms"]["count"] == 60
    final = stack.metadata["slo"].value
    launches = 2 if stack.metadata["validated"].value else 1
    assert final["met"] is True and final["launches"] == launches and final["e2e_upper_ms"] <= 120000, final
    text = Path(report.metadata["report_path"].value).read_text()
    assert ("SLO (p95, 95% upper bounds, launch by launch: TTFT <= 60000 ms, E2E <= 120000 ms): the baseline meets "
            "it; the final config meets it.") in text
