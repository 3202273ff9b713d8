"""The lm-eval path of the gate: `lm_eval --model local-completions` against a server. Pure code.

For a GPU host with a real model, a target may ask for a task instead of the default
agreement check (`accuracy: {kind: lm_eval, task: gsm8k, tolerance: 0.05}`): each side
is scored on its own server and the candidate passes unless its score falls more than
`tolerance` (absolute, on the task's 0..1 metric) below the running best's. The data sets
are downloaded by lm-eval itself, so this path cannot run on a machine without a hub.
"""

from __future__ import annotations

from pathlib import Path

from hyperloom_assets.core.accuracy.agreement import Verdict
from hyperloom_assets.core.config.targets import LmEvalCheck
from hyperloom_assets.core.models import Strict

CONCURRENT_REQUESTS = 8


class LmEvalResult(Strict):
    verdict: Verdict
    reason: str
    task: str
    reference_score: float | None = None
    candidate_score: float | None = None
    tolerance: float


def lm_eval_argv(program: str, base_url: str, model: str, check: LmEvalCheck, output_dir: Path,
                 tokenizer: str | None = None) -> list[str]:
    """The command that scores one server; `base_url` is the server root (as for `hyperloom bench`)."""
    model_args = [f"model={model}", f"base_url={base_url.rstrip('/')}/v1/completions",
                  f"num_concurrent={CONCURRENT_REQUESTS}", "max_retries=3", "tokenized_requests=False"]
    if tokenizer:
        model_args.append(f"tokenizer={tokenizer}")
    argv = [program, "--model", "local-completions", "--model_args", ",".join(model_args), "--tasks", check.task,
            "--batch_size", "1", "--output_path", str(output_dir)]
    if check.limit is not None:
        argv += ["--limit", str(check.limit)]
    if check.num_fewshot is not None:
        argv += ["--num_fewshot", str(check.num_fewshot)]
    return argv


def task_score(results: dict, task: str) -> float:
    """The task's first metric in lm-eval's results JSON (`results[task]`, e.g. `exact_match,strict-match`)."""
    metrics = (results.get("results") or {}).get(task)
    if not isinstance(metrics, dict):
        raise ValueError(f"lm-eval results have no task {task!r}")
    for name, value in metrics.items():
        if name != "alias" and "_stderr" not in name and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    raise ValueError(f"lm-eval results for {task!r} hold no numeric metric")


def lm_eval_verdict(check: LmEvalCheck, reference: float, candidate: float) -> LmEvalResult:
    drop = reference - candidate
    verdict: Verdict = "pass" if drop <= check.tolerance else "drop"
    reason = (f"{check.task}: {candidate:.4f} against the running best's {reference:.4f} "
              f"(a drop of {drop:+.4f}; {check.tolerance:g} allowed)")
    return LmEvalResult(verdict=verdict, reason=reason, task=check.task, reference_score=reference,
                        candidate_score=candidate, tolerance=check.tolerance)
