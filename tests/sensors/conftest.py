"""Fixtures for the sensor tests: a targets folder, definitions with the sensors, a tick."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

import dagster as dg
import pytest
import yaml

from hyperloom_assets.definitions import build_defs
from hyperloom_assets.resources.hosts.local import LocalHost
from hyperloom_assets.resources.store.results import ResultStore
from hyperloom_assets.sensors import build_sensors
from tests.conftest import SIM_MODEL
from tests.sensors.loopback_index import LoopbackIndex

SIM_ARGS = ["--gpu", "H100", "--time-scale", "50", "--max-num-seqs", "4"]


def write_target(folder: Path, name: str, server_args: list[str] | None = None, **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = {"engine": "sim", "model": str(SIM_MODEL), "server_args": SIM_ARGS if server_args is None else server_args,
            "workload": {"kind": "random", "isl": 256, "osl": 64, "concurrency": 8}, **extra}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def defs_with_sensors(folder: Path, host: LocalHost, store: ResultStore) -> dg.Definitions:
    """build_defs plus the sensors, as definitions.py wires them (or already does)."""
    base = build_defs(folder, host=host, store=store)
    names = {sensor.name for sensor in base.sensors or []}
    if {"target_change_sensor", "framework_release_sensor"} <= names:
        return base
    jobs = {job.name: job for job in base.jobs}
    sensors = build_sensors(jobs["optimize_job"].partitions_def, jobs)
    return dg.Definitions.merge(base, dg.Definitions(sensors=sensors))


class Collect(logging.Handler):
    def __init__(self, into: list[str]):
        super().__init__(logging.DEBUG)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(f"{record.levelname} {record.getMessage()}")


def tick(defs: dg.Definitions, sensor_name: str, instance: dg.DagsterInstance, cursor: str | None,
         logged: list[str] | None = None) -> dg.SensorResult:
    """One evaluation; what the sensor logs goes into `logged` when given."""
    # As a context manager: the fleet resource sets itself up (and, in a run, its lease).
    with dg.build_sensor_context(instance=instance, cursor=cursor, resources=dict(defs.resources or {})) as context:
        if logged is not None:
            context.log.addHandler(Collect(logged))
        result = defs.get_repository_def().get_sensor_def(sensor_name)(context)
    assert isinstance(result, dg.SensorResult)
    return result


def run_keys(result: dg.SensorResult) -> list[str]:
    return [request.run_key for request in result.run_requests or []]


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as instance:
        yield instance


@pytest.fixture
def index(monkeypatch) -> Iterator[LoopbackIndex]:
    """A package index on loopback; the sensor and the envs are pointed at it."""
    served = LoopbackIndex().start()
    monkeypatch.setenv("HYPERLOOM_PACKAGE_INDEX_URL", served.json_base)
    monkeypatch.delenv("HYPERLOOM_PACKAGE_SIMPLE_URL", raising=False)
    try:
        yield served
    finally:
        served.stop()
