"""benchmarks/calibration/cases.yaml: every published figure carries where it came from and what ran it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from hyperloom_assets.sim.cases import CASES_FILE, load_cases
from hyperloom_assets.core.roofline.gpus import gpu_spec


def test_every_case_names_its_source_setup_and_figure() -> None:
    calibration = load_cases()
    assert len(calibration.cases) >= 30
    for case in calibration.cases:
        source = calibration.source_of(case)
        assert source.address.startswith("https://"), case.id
        assert source.commit or source.date or source.build, case.id
        assert source.command.strip() and source.engine and source.hardware and source.figure_meaning, case.id
        assert case.model and case.dtype and case.weight_dtype and case.kv_cache_dtype, case.id
        assert case.figure in case.quote and case.seconds > 0, case.id
        gpu_spec(case.gpu)  # a GPU of the sim's table
        if case.sim_model_dir is not None:
            assert (case.sim_model_dir / "config.json").is_file(), case.id


def test_the_set_holds_the_kinds_the_issue_asks_for() -> None:
    calibration = load_cases()
    by_source = {case.source for case in calibration.cases}
    assert {"rocm-vllm-0.10.0-mi300x-latency", "vllm-perf-benchmark-build-9515"} <= by_source
    assert any(case.tp == 1 and case.gpu in ("H100", "H200") for case in calibration.cases)  # one GPU
    assert any("mixtral" in (case.sim_model or "") for case in calibration.cases)  # an MoE model
    assert all(item.why for item in calibration.excluded) and calibration.missing


def _write(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load(CASES_FILE.read_text())
    edit(data)
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["cases"][0].update(figure="99.999"), "is not in its quote"),
    (lambda d: d["cases"][0].update(source="nowhere"), "unknown sources"),
    (lambda d: d["cases"][0].update(batch_size=1), "Extra inputs are not permitted"),
    (lambda d: d["sources"]["vllm-pr-2542-fused-moe-mixtral"].pop("date"), "commit, a date or a build"),
    (lambda d: d["sources"]["vllm-pr-2542-fused-moe-mixtral"].pop("command"), "command"),
])
def test_a_case_without_its_provenance_is_refused(tmp_path: Path, edit, message) -> None:
    with pytest.raises(ValidationError, match=message):
        load_cases(_write(tmp_path, edit))
