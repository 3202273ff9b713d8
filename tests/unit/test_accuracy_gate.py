"""The accuracy gate's rule (vLLM's check_logprobs_close), its verdict and the lm-eval path."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.accuracy.agreement import MIN_AGREEMENT, PromptOutput, compare_prompt, judge
from hyperloom_assets.core.accuracy.lm_eval import lm_eval_argv, lm_eval_verdict, task_score
from hyperloom_assets.core.accuracy.prompts import fixed_prompts
from hyperloom_assets.core.config.targets import LmEvalCheck


def output(tokens: str, tops: list[str]) -> PromptOutput:
    """Tokens as letters; each position's top-k as a string of letters."""
    return PromptOutput(tokens=list(tokens), top_logprobs=[{t: -1.0 for t in top} for top in tops])


def test_identical_tokens_agree_without_reading_logprobs() -> None:
    same = PromptOutput(tokens=["a", "b"], top_logprobs=[None, None])
    assert compare_prompt(0, same, same).agrees


def test_a_divergence_agrees_when_each_token_is_in_the_others_top_k_and_stops_there() -> None:
    ref = output("abx", ["a", "bc", "x"])
    cand = output("acz", ["a", "cb", "q"])  # position 2 would fail, but the walk stops at 1
    result = compare_prompt(0, ref, cand)
    assert result.agrees and result.diverged_at == 1 and result.matched == 1


@pytest.mark.parametrize("ref_top,cand_top", [("b", "cb"), ("bc", "c")])
def test_a_divergence_differs_when_either_token_is_missing_from_the_others_top_k(ref_top, cand_top) -> None:
    assert not compare_prompt(0, output("ab", ["a", ref_top]), output("ac", ["a", cand_top])).agrees


def test_verdict_passes_at_the_threshold_and_drops_under_it() -> None:
    good, bad = output("ab", ["a", "b"]), output("az", ["a", "z"])
    prompts = 10
    agreeing = int(MIN_AGREEMENT * prompts)
    at = judge([good] * prompts, [good] * agreeing + [bad] * (prompts - agreeing))
    under = judge([good] * prompts, [good] * (agreeing - 1) + [bad] * (prompts - agreeing + 1))
    assert (at.verdict, at.agreed) == ("pass", agreeing)
    assert (under.verdict, under.agreed) == ("drop", agreeing - 1)


def test_missing_logprobs_at_a_divergence_make_the_gate_unavailable() -> None:
    ref = PromptOutput(tokens=["a"], top_logprobs=[])
    assert judge([ref], [output("b", ["b"])]).verdict == "unavailable"
    assert judge([], []).verdict == "unavailable"


def test_fixed_prompts_are_distinct_and_stable() -> None:
    prompts = fixed_prompts(32)
    assert len(set(prompts)) == 32 and prompts == fixed_prompts(32) and fixed_prompts(4) == prompts[:4]


def test_lm_eval_command_line_targets_the_server_with_local_completions(tmp_path) -> None:
    check = LmEvalCheck(kind="lm_eval", task="gsm8k", tolerance=0.05, limit=200, num_fewshot=5)
    argv = lm_eval_argv("lm_eval", "http://127.0.0.1:8000/", "meta/llama", check, tmp_path)
    assert argv[:3] == ["lm_eval", "--model", "local-completions"]
    model_args = dict(part.split("=", 1) for part in argv[argv.index("--model_args") + 1].split(","))
    assert model_args["base_url"] == "http://127.0.0.1:8000/v1/completions"
    assert model_args["model"] == "meta/llama" and model_args["tokenized_requests"] == "False"
    assert argv[argv.index("--tasks") + 1] == "gsm8k"
    assert argv[argv.index("--limit") + 1] == "200" and argv[argv.index("--num_fewshot") + 1] == "5"
    assert argv[argv.index("--output_path") + 1] == str(tmp_path)


def test_lm_eval_score_and_tolerance() -> None:
    results = {"results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.42,
                                     "exact_match_stderr,strict-match": 0.01}}}
    assert task_score(results, "gsm8k") == 0.42
    with pytest.raises(ValueError, match="no task"):
        task_score(results, "mmlu")
    check = LmEvalCheck(kind="lm_eval", task="gsm8k", tolerance=0.05)
    assert lm_eval_verdict(check, 0.42, 0.38).verdict == "pass"
    assert lm_eval_verdict(check, 0.42, 0.36).verdict == "drop"
