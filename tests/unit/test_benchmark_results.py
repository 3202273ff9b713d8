"""benchmarks/support/results.py: the file a README figure is quoted from names the code that made it."""

from __future__ import annotations

import json

from benchmarks.support import results


def test_a_result_names_the_commit_its_run_started_on_not_the_one_at_its_end(tmp_path, monkeypatch) -> None:
    started = results.STARTED_ON_COMMIT
    monkeypatch.setattr(results, "_git_commit", lambda: "committed-meanwhile")  # HEAD moved during the run
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    written = json.loads(results.write_results("probe", {"x": 1}).read_text())
    assert written["machine"]["git_commit"] == started != "committed-meanwhile"
    assert written["commit"] == started and written["dirty"] is results.STARTED_DIRTY
    assert written["results"] == {"x": 1} and written["benchmark"] == "probe"
