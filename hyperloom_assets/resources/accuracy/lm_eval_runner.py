"""Runs `lm_eval --model local-completions` against one server and reads its score."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from hyperloom_assets.core.accuracy.lm_eval import lm_eval_argv, task_score
from hyperloom_assets.core.config.targets import LmEvalCheck
from hyperloom_assets.resources.accuracy.client import GateUnavailable

LM_EVAL_TIMEOUT_S = 4 * 3600
PROGRAM = "lm_eval"


def score_server(base_url: str, model: str, check: LmEvalCheck, output_dir: Path, program: str = PROGRAM) -> float:
    """The task's score on one server; GateUnavailable when lm-eval is missing, fails or writes no result."""
    found = shutil.which(program)
    if found is None:
        raise GateUnavailable(f"{program} is not installed (pip install lm-eval; its data sets are downloaded "
                              "from the Hugging Face hub, which this host must reach)")
    output_dir.mkdir(parents=True, exist_ok=True)
    argv = lm_eval_argv(found, base_url, model, check, output_dir)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=LM_EVAL_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise GateUnavailable(f"lm_eval ran past {LM_EVAL_TIMEOUT_S} s") from exc
    (output_dir / "lm_eval.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        raise GateUnavailable(f"lm_eval failed: {tail[0][:300]}")
    results = sorted(output_dir.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    if not results:
        raise GateUnavailable(f"lm_eval wrote no results_*.json under {output_dir}")
    try:
        return task_score(json.loads(results[-1].read_text()), check.task)
    except (ValueError, OSError) as exc:
        raise GateUnavailable(f"lm_eval results {results[-1]}: {exc}") from exc
