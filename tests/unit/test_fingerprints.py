"""The one ledger fingerprint: a change's identity, never its name (docs/design.md, invariant 1)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hyperloom_assets.core.config.targets import Workload
from hyperloom_assets.core.planning.fingerprints import (
    context_key,
    fingerprint_change,
    trial_fingerprint,
    variant_fingerprint,
    workload_signature,
)
from hyperloom_assets.core.planning.variants import Variant


def variant(name: str = "v", **change) -> Variant:
    fields = {"provenance": "seed_grid", "reason": "test", **change}
    return Variant(name=name, **fields)


def test_fingerprint_is_sha1_of_canonical_json_first_16_hex():
    expected_payload = {"argv": [["--a", "1"], ["--b"]], "env": [["K", "v"]]}
    canonical = json.dumps(expected_payload, sort_keys=True, separators=(",", ":"))
    expected = hashlib.sha1(canonical.encode()).hexdigest()[:16]
    assert fingerprint_change(["--b", "--a", "1"], {"K": "v"}) == expected
    assert len(expected) == 16


def test_flag_order_does_not_matter_but_pairing_does():
    ab = fingerprint_change(["--a", "1", "--b", "2"], {})
    ba = fingerprint_change(["--b", "2", "--a", "1"], {})
    swapped_values = fingerprint_change(["--a", "2", "--b", "1"], {})
    assert ab == ba
    # Sorting raw tokens would give ["--a", "--b", "1", "2"] for both: they must differ.
    assert ab != swapped_values


def test_equals_form_and_underscores_are_the_same_change():
    assert fingerprint_change(["--max-num-seqs=8"], {}) == fingerprint_change(["--max-num-seqs", "8"], {})
    assert fingerprint_change(["--max_num_seqs", "8"], {}) == fingerprint_change(["--max-num-seqs", "8"], {})


def test_renaming_never_bypasses_dedup():
    one = variant("raise-cap", add_args=["--max-num-seqs", "64"])
    two = variant("completely-different-name", add_args=["--max-num-seqs", "64"], reason="other", expected_value=9,
                  provenance="llm")
    assert variant_fingerprint(one) == variant_fingerprint(two)


def test_removal_and_unset_are_part_of_the_change():
    add = variant(add_args=["--enforce-eager"])
    remove = variant(remove_args=["--enforce-eager"])
    nothing = variant()
    assert len({variant_fingerprint(add), variant_fingerprint(remove), variant_fingerprint(nothing)}) == 3
    assert variant_fingerprint(variant(unset_env=["X"])) != variant_fingerprint(variant(set_env={"X": ""}))
    assert variant_fingerprint(variant(remove_args=["--a", "--b"])) == variant_fingerprint(variant(remove_args=["--b", "--a"]))


def test_env_values_and_order():
    assert fingerprint_change([], {"A": "1", "B": "2"}) == fingerprint_change([], {"B": "2", "A": "1"})
    assert fingerprint_change([], {"A": "1"}) != fingerprint_change([], {"A": "2"})
    assert fingerprint_change([], {"A": "1", "B": "2"}) != fingerprint_change([], {"A": "2", "B": "1"})


def test_args_mode_only_counts_when_present():
    assert fingerprint_change(["--a", "1"], {}, args_mode=None) == fingerprint_change(["--a", "1"], {})
    assert fingerprint_change(["--a", "1"], {}, args_mode="replace") != fingerprint_change(["--a", "1"], {})


def test_trial_fingerprint_counts_the_stack():
    cap = variant("cap", add_args=["--max-num-seqs", "64"])
    budget = variant("budget", add_args=["--max-num-batched-tokens", "8192"])
    assert trial_fingerprint([], budget) == variant_fingerprint(budget)
    # The same budget on top of a raised cap is a different experiment...
    assert trial_fingerprint([cap], budget) != trial_fingerprint([], budget)
    # ...and two routes to the same config share one fingerprint.
    assert trial_fingerprint([cap], budget) == trial_fingerprint([budget], cap)
    # A step back to something tried on the baseline is recognized as tried.
    lower = variant("lower", add_args=["--max-num-seqs", "16"])
    assert trial_fingerprint([cap], lower) == variant_fingerprint(lower)


def test_context_key_separates_every_part():
    workload = workload_signature(Workload(kind="random", isl=128, osl=32, concurrency=8), model="m")
    base = context_key("t", workload, "vllm-0.32", "cfg1")
    assert base == context_key("t", dict(workload), "vllm-0.32", "cfg1")
    others = {
        context_key("t2", workload, "vllm-0.32", "cfg1"),
        context_key("t", {**workload, "concurrency": 16}, "vllm-0.32", "cfg1"),
        context_key("t", workload, "git:abc", "cfg1"),
        context_key("t", workload, "vllm-0.32", "cfg2"),
    }
    assert base not in others and len(others) == 4


def test_workload_signature_fields(tmp_path: Path):
    random = workload_signature(Workload(kind="random", isl=256, osl=64, concurrency=16, seed=3), model="tiny")
    assert random == {"model": "tiny", "kind": "random", "concurrency": 16, "isl": 256, "osl": 64, "prefix_len": 0,
                      "trace_sha1": None, "prompts": 160, "warmups": 8, "seed": 3, "request_rate": None}
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"session_id": "s1", "turns": [{"user_tokens": 5, "output_tokens": 2}, {"user_tokens": 3, "output_tokens": 2}]}\n')
    agentic = workload_signature(Workload(kind="agentic", trace=trace, concurrency=2))
    assert agentic["prompts"] == 2
    assert agentic["trace_sha1"] == hashlib.sha1(trace.read_bytes()).hexdigest()
    before = agentic["trace_sha1"]
    trace.write_text(trace.read_text().replace('"user_tokens": 3', '"user_tokens": 4'))
    assert workload_signature(Workload(kind="agentic", trace=trace, concurrency=2))["trace_sha1"] != before
