"""Calibration profiles: the perf model's efficiency parameters for one GPU and engine, and their fit. Pure code.

A profile is a YAML file written by `hyperloom sim-calibrate` (calibrate.py) and read by
the sim's `--calibration FILE|NAME|GPU|auto` (find_profile):

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

import hashlib

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

    cases_file: str | None  # the published cases fitted, None where the fit left them out
    cases_sha256: str | None = Field(pattern=r"^[0-9a-f]{64}$")
    results: dict[str, str] = {}  # serving result files fitted (serving_cases.py): path -> sha256
    store_target: str | None = None  # the target whose stored measurements were fitted
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


def is_profile_path(value: str) -> bool:
    """Whether `--calibration VALUE` names a file rather than a packaged profile."""
    return Path(value).suffix in (".yaml", ".yml") or len(Path(value).parts) > 1


def _profiles(folder: Path) -> dict[Path, CalibrationProfile]:
    return {path: load_profile(path) for path in sorted(folder.glob("*.yaml"))}


def find_profile(value: str, gpu: str, engine: str, folder: Path = PROFILES_DIR) -> Path | None:
    """The profile `--calibration VALUE` names for a sim of `gpu` speaking `engine`.

    A value with a `.yaml` suffix or a folder in it is that file. `auto` is the folder's profile
    for this GPU and engine, or None where it has none (the perf model's constants). Anything
    else is a profile's name (its file's stem, `mi300x-vllm`) or its GPU's name (`MI300X`, for
    this engine) in the folder; CalibrationError names the value and what the folder holds.
    """
    if is_profile_path(value):
        return Path(value)
    profiles = _profiles(folder)
    if value == "auto":
        return next((path for path, p in profiles.items() if p.gpu == gpu and p.engine == engine), None)
    named = [path for path, p in profiles.items()
             if path.stem == value or (p.gpu.lower() == value.lower() and p.engine == engine)]
    if named:
        return named[0]
    held = ", ".join(f"{path.stem} ({p.gpu}, {p.engine})" for path, p in profiles.items()) or "none"
    raise CalibrationError(f"calibration profile {value!r}: no such file, and no profile of that name or of that "
                           f"GPU for engine {engine} in {folder} (it holds: {held})")


def profile_for(value: str, gpu: str, engine: str, folder: Path = PROFILES_DIR) -> CalibrationProfile | None:
    """The profile `--calibration VALUE` names, loaded (None for `auto` where none is packaged);
    CalibrationError for an unknown name, an unreadable file or a profile of another GPU."""
    path = find_profile(value, gpu, engine, folder)
    if path is None:
        return None
    profile = load_profile(path)
    if profile.gpu != gpu:
        raise CalibrationError(f"profile {value} is for {profile.gpu}, not --gpu {gpu}")
    return profile


def describe_calibration(value: str | None, gpu: str, engine: str, folder: Path = PROFILES_DIR) -> str:
    """What predicts a sim's numbers, for run metadata and reports: the profile and its content's hash."""
    uncalibrated = "the sim's performance model, uncalibrated (the constants of sim/perf_model.py)"
    if value is None:
        return uncalibrated
    try:
        path = find_profile(value, gpu, engine, folder)
        if path is None:
            return f"{uncalibrated}: no packaged profile for {gpu} and {engine}"
        profile = load_profile(path)
    except CalibrationError as exc:
        return f"calibration profile {value!r}, unread here ({exc})"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    fit = (f"; fitted on {len(profile.fit.cases)} cases of {profile.fit.cases_file}" if profile.fit else "; not fitted")
    return (f"the sim's performance model with calibration profile {path.name} "
            f"({profile.gpu}, {profile.engine}; sha256 {digest}{fit})")


def describe_prediction(value: str | None, gpu: str, engine: str, engine_version: str | None) -> str:
    """describe_calibration, and which of physics.py's engine rows times the engine's CPU work."""
    from hyperloom_assets.sim.physics import engine_overhead

    try:
        row = engine_overhead(engine, engine_version).label
    except ValueError as exc:
        row = f"unread here ({exc})"
    return f"{describe_calibration(value, gpu, engine)}; CPU overhead per step: {row} (sim/physics.py)"
