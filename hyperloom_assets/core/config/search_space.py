"""A target's own search space: the flags and env values the operator wants tried. Pure code.

```yaml
search_space:
  args: {"--max-num-seqs": [64, 128, 256], "--enable-prefix-caching": [true]}
  env: {VLLM_ATTENTION_BACKEND: [FLASH_ATTN, FLASHINFER]}
  only: false    # true: search these alone, without the seed grid and without ablations
```

A valued flag lists its values; a switch (a flag that takes no value) is listed with
`[true]`. YAML numbers are accepted and become the text the engine is given. Whether a
flag and its values are the engine's own is the engine's parser's call (`hyperloom
targets check`, and the run before its first launch: resources/hosts/space_check.py).
"""

from __future__ import annotations

from pydantic import StrictBool, StrictFloat, StrictInt, StrictStr, field_validator, model_validator

from hyperloom_assets.core.measurement.serving import env_problems
from hyperloom_assets.core.models import Strict
from hyperloom_assets.core.planning.variants import canonical_flag, looks_like_flag

Scalar = StrictStr | StrictInt | StrictFloat


def as_text(value: Scalar) -> str:
    return str(value)


class SearchSpace(Strict):
    args: dict[str, list[Scalar | StrictBool]] = {}
    env: dict[str, list[Scalar]] = {}
    only: bool = False  # true: these knobs alone, no seed grid, no ablation of the operator's flags

    @field_validator("args")
    @classmethod
    def _flags_and_values(cls, args: dict[str, list]) -> dict[str, list]:
        seen: set[str] = set()
        for flag, values in args.items():
            if not looks_like_flag(flag):
                raise ValueError(f"{flag!r} is not a flag: a key of args starts with a dash (--max-num-seqs)")
            if canonical_flag(flag) in seen:
                raise ValueError(f"{flag!r} is given twice (as {flag} and with underscores or dashes swapped)")
            seen.add(canonical_flag(flag))
            _values_ok(flag, values)
            if False in values:
                raise ValueError(f"{flag}: false is not a value; list a switch as [true], and leave it out "
                                 "to keep the base's setting")
            if True in values and any(v is not True for v in values):
                raise ValueError(f"{flag}: either [true] (a switch) or values the flag takes, not both")
        return args

    @field_validator("env")
    @classmethod
    def _env_names_and_values(cls, env: dict[str, list]) -> dict[str, list]:
        for name, values in env.items():
            problems = [problem for value in values or [""] for problem in env_problems({name: as_text(value)})]
            if problems:
                raise ValueError(problems[0])
            _values_ok(name, values)
        return env

    @model_validator(mode="after")
    def _something_to_search(self) -> SearchSpace:
        if self.only and not (self.args or self.env):
            raise ValueError("only: true needs at least one knob in args or env")
        return self

    def argvs(self) -> list[list[str]]:
        """One argv per flag value: what the engine's parser is asked to accept."""
        return [[flag] if value is True else [flag, as_text(value)]
                for flag, values in self.args.items() for value in values]


def _values_ok(knob: str, values: list) -> None:
    if not values:
        raise ValueError(f"{knob}: give at least one value")
    texts = [as_text(v) for v in values]
    if len(set(texts)) != len(texts):
        raise ValueError(f"{knob}: a value is listed twice ({texts})")
