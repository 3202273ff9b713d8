"""Calibration profiles: the perf model's efficiency parameters for one GPU and engine, and their fit. Pure code.

A profile is a YAML file written by `hyperloom sim-calibrate` (calibrate.py) and read by
the sim's `--calibration FILE`:

    gpu: MI300X
    engine: vllm
    parameters: {bw_efficiency: ..., layer_fixed_s: ..., ...}   # a SimCalibration
    fit: {cases_file, cases_sha256, fitted, held, cases: [...]}  # how they were fitted

`parameters` left out keep the perf model's constants (perf_model.py). Reading refuses an
unknown or out-of-range field, naming the file and the field, so a typo never silently
falls back to a default.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from hyperloom_assets.core.models import Frozen
from hyperloom_assets.sim.perf_model import SimCalibration

PROFILES_DIR = Path(__file__).with_name("profiles")


class CalibrationError(ValueError):
    """A profile that cannot be read: the message names the file and the field."""


class CaseFit(Frozen):
    """One measurement and what the fitted parameters predict for it (ratio: predicted / measured)."""

    id: str
    measured_s: float = Field(gt=0)
    predicted_s: float = Field(gt=0)
    ratio: float = Field(gt=0)
    loo_predicted_s: float | None = Field(default=None, gt=0)  # fitted without this case
    loo_ratio: float | None = Field(default=None, gt=0)


class FitReport(Frozen):
    """Where the parameters came from: the cases, which parameters moved, and the error per case."""

    cases_file: str
    cases_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    method: str
    fitted: list[str]
    held: list[str]  # kept at their starting values: these cases cannot tell them apart from a fitted one
    cases: list[CaseFit]
    notes: list[str] = []


class CalibrationProfile(Frozen):
    gpu: str
    engine: str
    parameters: SimCalibration = SimCalibration()
    fit: FitReport | None = None


def _field_errors(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in error['loc']) or '(top level)'}: {error['msg']}"
                     for error in exc.errors())


def load_profile(path: Path) -> CalibrationProfile:
    """The profile in `path`, or CalibrationError naming the file and the bad field."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise CalibrationError(f"calibration profile {path}: cannot read it ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        raise CalibrationError(f"calibration profile {path}: not YAML ({exc})") from exc
    try:
        return CalibrationProfile.model_validate(data)
    except ValidationError as exc:
        raise CalibrationError(f"calibration profile {path}: {_field_errors(exc)}") from exc


def write_profile(profile: CalibrationProfile, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False))
