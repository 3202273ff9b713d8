"""What the asset checks judge, in pure code: rounding, typed tables, the report against the
store, each measurement against its own roofline ceiling, and the two report plots."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.report.consistency import compare_report
from hyperloom_assets.core.report.markdown import render_markdown
from hyperloom_assets.core.report.plots import Step, keeper_steps, plot_gains_waterfall, plot_roofline_position
from hyperloom_assets.core.report.precision import rounded
from hyperloom_assets.core.report.tables import Column, Table, sweep_table, trials_table
from hyperloom_assets.core.roofline.model_shape import shape_from_config
from hyperloom_assets.core.roofline.position import positions, report_rows
from hyperloom_assets.core.roofline.roofline import gpu_hardware, workload_roofline
from tests.unit.test_report import inputs
from tests.unit.test_roofline import LLAMA_3_8B


def test_rounding_follows_the_unit_and_passes_missing_values_through() -> None:
    assert rounded(1234.5678, "tok/s") == 1234.6
    assert rounded(12.34567, "%") == 12.35
    assert rounded(3.14159, "ms") == 3.1
    assert rounded(0.123456, "req/s") == 0.123
    assert rounded(None, "%") is None
    assert rounded(float("nan"), "%") != rounded(float("nan"), "%"), "NaN stays NaN"


def test_trials_table_is_typed_and_rounded() -> None:
    table = trials_table(inputs().trials)
    row = table.rows[0]
    assert [c.name for c in table.columns] == list(row)
    assert row["outcome"] == "KEEP" and row["launches"] == 2 and row["best_relaunches"] == 1
    assert row["output_throughput"] == 180.5 and row["gain_pct"] == 80.0 and row["replayed"] is False
    kinds = {c.name: c.type for c in table.columns}
    assert kinds["gain_pct"] == "float" and kinds["index"] == "int" and kinds["replayed"] == "bool"


def test_a_row_that_does_not_match_its_columns_is_refused() -> None:
    with pytest.raises(ValidationError, match="expected"):
        Table(columns=[Column(name="a", type="int", description="")], rows=[{"b": 1}])


def test_sweep_table_rounds_each_column_to_its_unit() -> None:
    row = {"config": "stack", "concurrency": 16, "output_throughput": 1234.5678, "request_throughput": 3.14159,
           "tpot_p50_ms": 12.3456, "interactivity": 81.0004, "ttft_p50_ms": 45.678, "completed": 160}
    assert sweep_table([row]).rows[0] == {"config": "stack", "concurrency": 16, "output_throughput": 1234.6,
                                          "request_throughput": 3.142, "tpot_p50_ms": 12.3, "interactivity": 81.0,
                                          "ttft_p50_ms": 45.7, "completed": 160, "latency_warning": ""}


def report_and_store():
    r = inputs()
    report = json.loads(r.model_dump_json())
    baseline = r.baseline.model_dump(mode="json")
    stack = {"final_output_throughput": 180.5, "validated_gain_pct": 80.5, "validated_gain_ci_low": 75.0,
             "validated_gain_ci_high": 86.0, "validated": True}
    trials = [{"fingerprint": "abc123", "outcome": "KEEP"}]
    return report, render_markdown(r), baseline, stack, trials


def test_a_report_built_from_the_store_matches_it() -> None:
    found = compare_report(*report_and_store())
    assert found and all(c.matches for c in found), [c for c in found if not c.matches]


@pytest.mark.parametrize("mutation, what", [
    (lambda report, md, base, stack, trials: stack.update(final_output_throughput=181.0), "final output tok/s"),
    (lambda report, md, base, stack, trials: stack.update(validated_gain_ci_low=74.0), "validated gain interval low %"),
    (lambda report, md, base, stack, trials: base.update(output_throughput=99.0), "baseline output tok/s"),
    (lambda report, md, base, stack, trials: trials[0].update(outcome="REVERT"), "trial 1 abc123 outcome"),
    (lambda report, md, base, stack, trials: report.update(validated_gain_pct=81.0), "validated gain %"),
])
def test_each_number_that_drifts_from_the_store_is_named(mutation, what) -> None:
    report, markdown, baseline, stack, trials = report_and_store()
    mutation(report, markdown, baseline, stack, trials)
    mismatched = [c.what for c in compare_report(report, markdown, baseline, stack, trials) if not c.matches]
    assert what in mismatched


def test_markdown_that_shows_other_numbers_than_its_json_is_caught() -> None:
    report, markdown, baseline, stack, trials = report_and_store()
    edited = markdown.replace("180.5 output tok/s", "190.5 output tok/s").replace("| KEEP |", "| REVERT |")
    mismatched = [c.what for c in compare_report(report, edited, baseline, stack, trials) if not c.matches]
    assert mismatched == ["headline throughputs", "trial 1 abc123 outcome in the Markdown table"]


def test_a_missing_stored_stack_is_a_mismatch_not_a_pass() -> None:
    report, markdown, baseline, _, trials = report_and_store()
    found = compare_report(report, markdown, baseline, None, trials)
    assert not [c for c in found if c.what == "final output tok/s"][0].matches


WORKLOAD = Workload(kind="random", isl=1024, osl=128, concurrency=16)


def row(id_: int, kind: str, tok_s: float, concurrency: int | None, argv=("--gpu", "H100"), context="ctx") -> dict:
    workload = {} if concurrency is None else {"concurrency": concurrency}
    return {"id": id_, "kind": kind, "fingerprint": None, "context_key": context, "argv": list(argv),
            "measurement": {"output_throughput": tok_s, "workload": workload}}


def test_each_measurement_is_held_to_the_ceiling_of_its_own_launch() -> None:
    shape, hardware = shape_from_config(LLAMA_3_8B), gpu_hardware("H100")
    roofline = workload_roofline(shape, hardware, WORKLOAD)
    found, unjudged = positions([row(1, "baseline", 100.0, 16), row(2, "sweep", 5000.0, 64),
                                 row(3, "trial", 100.0, 16, ("--kv-cache-dtype", "fp8")), row(4, "sweep", 1.0, None)],
                                shape, hardware, roofline)
    by_id = {p.measurement_id: p for p in found}
    assert by_id[1].ceiling_tok_s == pytest.approx(roofline.ceiling_tok_s), "the baseline's is the roofline asset's"
    assert by_id[2].output_throughput > roofline.ceiling_tok_s and not by_id[2].above, \
        "a rung at 4x concurrency is held to its own, higher ceiling (8,512 against 2,922 tok/s)"
    assert by_id[3].ceiling_tok_s > roofline.ceiling_tok_s, "fp8 KV halves the KV bytes a step reads"
    assert unjudged == [4]
    above, _ = positions([row(5, "sweep", 1.01 * roofline.ceiling_tok_s, 16)], shape, hardware, roofline)
    assert above[0].above and not by_id[1].above


def test_a_report_draws_on_its_context_from_its_baseline_on_and_its_replayed_trials() -> None:
    rows = [row(1, "trial", 1, 16), row(2, "baseline", 1, 16), row(3, "trial", 1, 16), row(4, "sweep", 1, 16, context="other"),
            {**row(5, "trial", 1, 16), "measurement": None}, row(6, "trial", 1, 16)]
    assert [r["id"] for r in report_rows(rows, "ctx", since_id=2, replayed_ids=set())] == [2, 3, 6]
    assert [r["id"] for r in report_rows(rows, "ctx", since_id=6, replayed_ids={1})] == [1, 6]


def test_the_waterfall_and_roofline_plots_are_written(tmp_path) -> None:
    r = inputs()
    steps = keeper_steps(r.trials)
    assert steps == [Step(label="max-num-seqs=16", gain_pct=80.0, ci_low_pct=70.0, ci_high_pct=90.0)]
    validated = Step(label="validated stack", gain_pct=80.5, ci_low_pct=75.0, ci_high_pct=86.0)
    for path in (plot_gains_waterfall(r.baseline, steps, validated, tmp_path / "w.png"),
                 plot_gains_waterfall(r.baseline, [], None, tmp_path / "none.png"),
                 plot_roofline_position(workload_roofline(shape_from_config(LLAMA_3_8B), gpu_hardware("H100"), WORKLOAD),
                                        r.roofline_before, r.roofline_after, tmp_path / "r.png")):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_the_report_embeds_the_new_plots_beside_the_old() -> None:
    text = render_markdown(inputs(waterfall_plot="gains_waterfall.png", roofline_plot="roofline_position.png"))
    assert "![gains_waterfall.png](gains_waterfall.png)" in text
    assert "![roofline_position.png](roofline_position.png)" in text and "![p.png](p.png)" in text
    assert text.index("roofline_position.png") < text.index("## Trials") < text.index("gains_waterfall.png")
