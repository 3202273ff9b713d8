"""The calibration set: published measurements with their provenance, from cases.yaml. Pure code.

A case is one figure copied from one document; its source says where that document is
(address, and a commit, a date or a CI build that pins it), what ran (engine, hardware,
the command as published) and what the figure means. Loading refuses a case without
them, a figure that is not in its quoted line, and an unknown field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, model_validator

from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.roofline.model_shape import ModelShape, load_shape

# The cases and the model folders they name are files of the repository, not package data:
# `hyperloom sim-calibrate` and benchmarks/sim_fidelity.py run from a checkout.
REPO = Path(__file__).resolve().parents[2]
CASES_FILE = REPO / "benchmarks" / "calibration" / "cases.yaml"
UNIT_SECONDS = {"s": 1.0, "ms": 1e-3}


class Source(Frozen):
    """One published document and the setup every case taken from it shares."""

    address: str = Field(min_length=8)
    repo: str | None = None
    path: str | None = None
    commit: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}$")
    date: str | None = Field(default=None, pattern=r"^\d{4}-\d{2}-\d{2}$")
    build: str | None = None
    where: str = Field(min_length=1)
    engine: str = Field(min_length=1)
    engine_version: str | None  # picks the engine's CPU overhead (sim/physics.py); None: unknown, the newest row
    hardware: str = Field(min_length=1)
    command: str = Field(min_length=1)
    substitution: str = Field(min_length=1)
    figure_meaning: str = Field(min_length=1)
    sim_engine_args: list[str] = []
    sim_engine_args_why: str | None = None
    caveats: list[str] = []

    @model_validator(mode="after")
    def _pinned(self) -> Source:
        if not (self.commit or self.date or self.build):
            raise ValueError(f"{self.address}: a source needs a commit, a date or a build that pins it")
        if self.sim_engine_args and not self.sim_engine_args_why:
            raise ValueError(f"{self.address}: sim_engine_args need sim_engine_args_why")
        return self


class Case(Frozen):
    """One published figure and the setup it was measured with."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    source: str
    model: str
    sim_model: str | None  # a folder of this repository with the same architecture; None: none here
    gpu: str
    gpus: int = Field(ge=1)
    tp: int = Field(ge=1)
    batch: int = Field(ge=1)
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=1)
    dtype: str
    weight_dtype: str
    kv_cache_dtype: str
    figure: str = Field(pattern=r"^\d+(\.\d+)?$")  # as published, digits kept
    unit: Literal["s", "ms"]
    quote: str

    @model_validator(mode="after")
    def _figure_is_quoted(self) -> Case:
        if not re.search(rf"(?<![\d.]){re.escape(self.figure)}(?![\d])", self.quote):
            raise ValueError(f"{self.id}: figure {self.figure} is not in its quote {self.quote!r}")
        if self.tp > self.gpus:
            raise ValueError(f"{self.id}: tp {self.tp} exceeds the {self.gpus} GPUs")
        return self

    @property
    def seconds(self) -> float:
        return float(self.figure) * UNIT_SECONDS[self.unit]

    @property
    def sim_model_dir(self) -> Path | None:
        return REPO / self.sim_model if self.sim_model else None

    def sim_shape(self) -> ModelShape:
        """The folder's architecture with the checkpoint's weight dtype (the folders hold 16-bit configs)."""
        assert self.sim_model_dir is not None
        return load_shape(self.sim_model_dir).model_copy(update={"dtype": self.weight_dtype})


class Excluded(Frozen):
    address: str
    what: str
    why: str


class CalibrationSet(Frozen):
    sources: dict[str, Source]
    cases: list[Case]
    excluded: list[Excluded]
    missing: list[str]

    @model_validator(mode="after")
    def _consistent(self) -> CalibrationSet:
        ids = [case.id for case in self.cases]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate case ids: {', '.join(duplicates)}")
        unknown = sorted({case.source for case in self.cases} - set(self.sources))
        if unknown:
            raise ValueError(f"cases name unknown sources: {', '.join(unknown)}")
        return self

    def source_of(self, case: Case) -> Source:
        return self.sources[case.source]

    def sim_engine_args(self, case: Case) -> list[str]:
        """The sim's engine args for the case: its source's, and the case's KV dtype."""
        return [*self.source_of(case).sim_engine_args, "--kv-cache-dtype", case.kv_cache_dtype]

    def engine_version(self, case: Case) -> str | None:
        return self.source_of(case).engine_version

    def predictable(self, gpu: str | None = None) -> list[Case]:
        """Cases with a model folder here, on `gpu` when given."""
        return [c for c in self.cases if c.sim_model and (gpu is None or c.gpu.lower() == gpu.lower())]


def load_cases(path: Path = CASES_FILE) -> CalibrationSet:
    """The calibration set in `path`; pydantic's ValidationError names the bad field."""
    return CalibrationSet.model_validate(yaml.safe_load(path.read_text()))
