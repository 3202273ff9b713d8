"""Variants on top of a base, and the stack of keepers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hyperloom_assets.core.planning.variants import (
    Variant,
    apply_variant,
    compose,
    effective_settings,
    parse_args,
    split_args,
)


def variant(name: str = "v", **change) -> Variant:
    return Variant(name=name, provenance="seed_grid", reason="test", **change)


def test_parse_args_forms():
    parsed = parse_args(["--max-num-seqs=8", "--enforce-eager", "--block-size", "16", "--no-enable-prefix-caching",
                         "--seed", "-1", "--unknown-bool", "--x", "v"])
    assert parsed == {"--max-num-seqs": "8", "--enforce-eager": None, "--block-size": "16",
                      "--no-enable-prefix-caching": None, "--seed": "-1", "--unknown-bool": None, "--x": "v"}


def test_known_boolean_never_swallows_a_value_token():
    # A known boolean followed by a stray token leaves the token alone.
    settings = split_args(["--enforce-eager", "positional"])
    assert settings[0].flag == "--enforce-eager" and settings[0].value is None
    assert settings[1].flag == "" and settings[1].value == "positional"


def test_later_setting_replaces_in_place_never_duplicates():
    config = apply_variant(["--max-num-seqs", "4", "--enforce-eager"], {}, variant(add_args=["--max-num-seqs", "64"]))
    assert config.argv == ["--max-num-seqs", "64", "--enforce-eager"]
    config = apply_variant(["--max_num_seqs=4"], {}, variant(add_args=["--max-num-seqs", "64"]))
    assert config.argv == ["--max-num-seqs", "64"]


def test_duplicate_base_flags_collapse_to_the_new_setting():
    config = apply_variant(["--a", "1", "--b", "--a", "2"], {}, variant(add_args=["--a", "3"]))
    assert config.argv == ["--a", "3", "--b"]


def test_new_flag_is_appended():
    config = apply_variant(["--enforce-eager"], {}, variant(add_args=["--kv-cache-dtype", "fp8"]))
    assert config.argv == ["--enforce-eager", "--kv-cache-dtype", "fp8"]


def test_removal_drops_the_flag_and_its_value():
    base = ["--max-num-seqs", "4", "--enforce-eager", "--block-size=32"]
    assert apply_variant(base, {}, variant(remove_args=["--max-num-seqs"])).argv == ["--enforce-eager", "--block-size=32"]
    assert apply_variant(base, {}, variant(remove_args=["--block-size"])).argv == ["--max-num-seqs", "4", "--enforce-eager"]
    assert apply_variant(base, {}, variant(remove_args=["--enforce-eager"])).argv == ["--max-num-seqs", "4", "--block-size=32"]


def test_env_set_and_unset():
    config = apply_variant([], {"A": "1", "B": "2"}, variant(set_env={"A": "9", "C": "3"}, unset_env=["B"]))
    assert config.env == {"A": "9", "C": "3"}
    assert config.unset_env == ["B"]


def test_a_variant_cannot_add_and_remove_the_same_knob():
    with pytest.raises(ValidationError, match="both add and remove"):
        variant(add_args=["--no-enforce-eager"], remove_args=["--enforce-eager"])
    with pytest.raises(ValidationError, match="both set and unset"):
        variant(set_env={"A": "1"}, unset_env=["A"])
    with pytest.raises(ValidationError, match="flags only"):
        variant(remove_args=["4"])
    with pytest.raises(ValidationError):
        Variant(name="x", provenance="seed_grid", reason="r", fingerprint="no such field")


def test_compose_later_keeper_wins_and_the_conflict_is_recorded():
    first = variant("cap-32", add_args=["--max-num-seqs", "32"], set_env={"X": "1"})
    second = variant("cap-64", add_args=["--max-num-seqs", "64"], set_env={"X": "2"})
    stack = compose(["--max-num-seqs", "4", "--enforce-eager"], {"E": "1"}, [first, second])
    assert stack.argv == ["--max-num-seqs", "64", "--enforce-eager"]
    assert stack.env == {"E": "1", "X": "2"}
    assert [k.name for k in stack.keepers] == ["cap-32", "cap-64"]
    arg_conflict = next(c for c in stack.conflicts if c.kind == "arg")
    assert (arg_conflict.name, arg_conflict.earlier, arg_conflict.later) == ("--max-num-seqs", "cap-32", "cap-64")
    assert (arg_conflict.earlier_value, arg_conflict.later_value) == ("32", "64")
    env_conflict = next(c for c in stack.conflicts if c.kind == "env")
    assert (env_conflict.name, env_conflict.earlier_value, env_conflict.later_value) == ("X", "1", "2")
    assert "cap-64" in arg_conflict.describe()


def test_compose_without_overlap_records_no_conflict():
    stack = compose(["--enforce-eager"], {}, [variant("a", add_args=["--a", "1"]), variant("b", remove_args=["--enforce-eager"])])
    assert stack.argv == ["--a", "1"]
    assert stack.conflicts == []
    assert stack.change.add_args == ["--a", "1"] and stack.change.remove_args == ["--enforce-eager"]


def test_compose_records_a_removal_of_an_earlier_keepers_flag():
    stack = compose([], {}, [variant("a", add_args=["--block-size", "32"]), variant("b", remove_args=["--block-size"])])
    assert stack.argv == []
    assert stack.conflicts[0].later_removes and stack.conflicts[0].earlier == "a"


def test_compose_unset_env_and_harness_flags():
    stack = compose(["--gpu", "H100", "--time-scale", "4", "--max-num-seqs", "4"], {"E": "1"},
                    [variant("cap", add_args=["--max-num-seqs", "16"]), variant("no-e", unset_env=["E"])],
                    harness_flags=frozenset({"--gpu", "--time-scale"}))
    assert stack.argv == ["--gpu", "H100", "--time-scale", "4", "--max-num-seqs", "16"]
    assert stack.engine_argv == ["--max-num-seqs", "16"]
    assert stack.env == {} and stack.unset_env == ["E"]
    with pytest.raises(ValueError, match="harness"):
        compose(["--gpu", "H100"], {}, [variant("bad", add_args=["--gpu", "A100"])], harness_flags=frozenset({"--gpu"}))


def test_effective_settings_treat_negation_as_the_same_knob():
    settings = effective_settings(["--no-enable-prefix-caching"])
    assert settings == {"--enable-prefix-caching": ("--no-enable-prefix-caching", None)}
    config = apply_variant(["--no-enable-prefix-caching"], {}, variant(add_args=["--enable-prefix-caching"]))
    assert config.argv == ["--enable-prefix-caching"]
