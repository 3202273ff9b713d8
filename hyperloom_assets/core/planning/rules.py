"""The planner's rule table, kept as data (rules.yaml beside this module). Pure code.

Loading validates with extra="forbid": a boost for a family no grid knows (or a rule the
table lacks), a diagnosis the diagnosis code cannot produce or one it can produce that
the table lacks is an error naming the file and the key. A boost keyed by a rule id acts
on that rule alone (a direction of a knob: `budget_down`), and wins over its family's.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import get_args

import yaml
from pydantic import ValidationError, model_validator

from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.planning.diagnosis import Bottleneck
from hyperloom_assets.core.planning.seed_grids import ScoringFamily

RULES_FILE = Path(__file__).with_name("rules.yaml")
FAMILIES = frozenset(get_args(ScoringFamily)) | {"ablation"}


class Rule(Frozen):
    score: float
    per_prefix_share: float = 0.0  # added score per unit of prefix share (0..1)
    text: str
    can_act: bool = True  # False: the change moves nothing the engine schedules, so no diagnosis boosts it


class DiagnosisRules(Frozen):
    text: str
    boosts: dict[str, float] = {}  # family (or rule id) -> added score while this diagnosis holds

    def boost(self, rule_id: str, family: str) -> float:
        return self.boosts.get(rule_id, self.boosts.get(family, 0.0))


class CombineRules(Frozen):
    """When the plan also offers several knobs' best values as one variant (planning/combine.py)."""
    min_score: float  # a knob joins when its best value scores at least this
    min_knobs: int = 2
    max_knobs: int = 6


class RuleTable(Frozen):
    rules: dict[str, Rule]
    diagnoses: dict[str, DiagnosisRules]
    combine: CombineRules

    @model_validator(mode="after")
    def _every_diagnosis(self) -> RuleTable:
        expected = set(get_args(Bottleneck))
        if set(self.diagnoses) != expected:
            raise ValueError(f"diagnoses must be exactly {sorted(expected)}, got {sorted(self.diagnoses)}")
        for name, diagnosis in self.diagnoses.items():
            unknown = sorted(set(diagnosis.boosts) - FAMILIES - set(self.rules))
            if unknown:
                raise ValueError(f"diagnoses.{name}.boosts name unknown families or rules {unknown}; "
                                 f"families: {', '.join(sorted(FAMILIES))}")
        if "combined" not in self.rules:
            raise ValueError("rules must hold `combined`, the rule of the variant that moves several knobs at once")
        return self


class RulesError(ValueError):
    """A rule table that cannot be used; the message names the file and the key."""


def load_rules(path: Path = RULES_FILE) -> RuleTable:
    try:
        raw = yaml.safe_load(path.read_text())
        return RuleTable.model_validate(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise RulesError(f"{path}: not a readable YAML file ({type(exc).__name__})") from exc
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(file)'}: {e['msg']}" for e in exc.errors())
        raise RulesError(f"{path}: {where}") from exc


@functools.cache
def shipped_rules() -> RuleTable:
    return load_rules()
