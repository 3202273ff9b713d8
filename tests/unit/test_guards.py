"""The baseline guards of invariants 6 and 7 (docs/design.md), decided in one place."""

from __future__ import annotations

import pytest

from hyperloom_assets.core.decisions.guards import (
    MAX_CONSECUTIVE_BASELINE_FAILURES,
    PREFIX_CACHE_OFF,
    after_failure,
    consecutive_failures,
    gave_up,
    prefix_cache_refusal,
)
from hyperloom_assets.core.engines import engine_for
from hyperloom_assets.core.engines.registry import flavor_of


@pytest.mark.parametrize("engine, args, evidence, refused", [
    ("vllm", [], {"enable_prefix_caching": False}, True),
    ("vllm", [], {"max_num_seqs": 4}, False),  # absent means on
    ("vllm", [], None, False),  # unreadable evidence is left alone
    ("sglang", [], {"disable_radix_cache": True}, True),
    ("sglang", [], {"disable_radix_cache": False}, False),
    ("sglang", [], None, False),
    ("atom", [], None, False),  # no launch record; on by default since v0.1.3
    ("atom", ["--no-enable_prefix_caching"], None, True),  # the requested args say off
    ("atom", ["--no-enable-prefix-caching"], None, True),
    ("atom", ["--no-enable-prefix-caching", "--enable_prefix_caching"], None, False),  # the last one wins
    ("sim", ["--flavor", "atom", "--no-enable-prefix-caching"], None, True),
    ("sim", ["--gpu", "H100"], {"enable_prefix_caching": False}, True),
    ("sim", ["--flavor", "sglang"], {"disable_radix_cache": True}, True),
    ("sim", ["--flavor=sglang"], {"enable_prefix_caching": False}, False),  # sglang reads its own record
])
def test_agentic_prefix_cache_guard_per_engine(engine, args, evidence, refused) -> None:
    refusal = prefix_cache_refusal(engine, args, evidence, "agentic")
    assert (refusal is not None) == refused
    if refusal:
        assert refusal.code == PREFIX_CACHE_OFF
        assert engine in refusal.message()


@pytest.mark.parametrize("identity, args, refused", [
    ("atom 0.1.2", [], True),  # off by default before v0.1.3
    ("atom 0.1.2", ["--enable_prefix_caching"], False),
    ("atom 0.1.2", ["--enable-prefix-caching"], False),
    ("atom 0.1.5", [], False),
    ("atom 0.1.6.dev12+gffdf3bb5d", [], False),
    (None, [], False),  # unknown version: judged as a current release
])
def test_atom_default_follows_its_release(identity, args, refused) -> None:
    refusal = prefix_cache_refusal("atom", args, None, "agentic", identity)
    assert (refusal is not None) == refused
    if refusal:
        assert "0.1.2" in refusal.message()


def test_only_agentic_baselines_are_judged() -> None:
    assert prefix_cache_refusal("vllm", [], {"enable_prefix_caching": False}, "random") is None
    assert prefix_cache_refusal("atom", [], None, "shared_prefix") is None


def test_flavor_and_argv_markers() -> None:
    assert flavor_of("sim", []) == "vllm"
    assert flavor_of("vllm", ["--flavor", "sglang"]) == "vllm"
    vllm = engine_for("vllm")
    assert vllm.argv_error("api_server.py: error: unrecognized arguments: --nope")
    assert vllm.argv_error("argument --kv-cache-dtype: invalid choice: 'x'")
    assert not vllm.argv_error("RuntimeError: CUDA out of memory")


def test_consecutive_failures_count_since_the_last_success() -> None:
    assert consecutive_failures([]) == 0
    assert consecutive_failures(["crash", "ok", "timeout", "crash"]) == 2
    assert consecutive_failures(["crash", "ok"]) == 0


def test_a_failed_attempt_is_retried_until_the_third_and_some_failures_stop_at_once() -> None:
    assert after_failure("crash", 1) is None and after_failure("timeout", 2) is None
    assert after_failure("crash", MAX_CONSECUTIVE_BASELINE_FAILURES) == "baseline_failed"
    assert after_failure("argv_invalid", 1) == "baseline_arg_error"
    assert after_failure("prefix_cache_off", 1) == "baseline_failed"
    assert after_failure("preflight", 0) == "baseline_failed"


def test_a_run_gave_up_only_when_its_last_failure_stopped_it() -> None:
    assert gave_up(["crash", "crash", "crash"]) and gave_up(["argv_invalid"]) and gave_up(["crash", "prefix_cache_off"])
    assert not gave_up(["crash"]), "cancelled after one failed attempt: it did not give up"
    assert not gave_up(["crash", "ok"]) and not gave_up([])
