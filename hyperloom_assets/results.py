"""The values assets hand each other (stored by Dagster's IO manager). Pure models."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from hyperloom_assets.measure_step import WorkloadContract
from hyperloom_assets.measurement import Measurement
from hyperloom_assets.release_run import ReleaseRun
from hyperloom_assets.serving import LaunchRecord, ServerSpec


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BaselineResult(Strict):
    """The anchor of every later gain (invariant 5) and the workload contract (invariant 4)."""

    target: str
    spec: ServerSpec
    measurement: Measurement
    launch: LaunchRecord
    contract: WorkloadContract
    measurement_id: int
    measuring_s: float
    framework_version: str
    config_version: str
    context_key: str
    run_id: str
    release: ReleaseRun | None = None  # set on a release-triggered run
