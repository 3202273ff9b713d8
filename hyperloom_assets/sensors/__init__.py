"""Sensors: target changes and engine releases re-run the targets they affect.

`build_sensors(partitions, jobs_by_name)` is what hyperloom_assets/definitions.py wires
in; see docs/sensors.md for why sensors rather than declarative automation.
"""

from __future__ import annotations

from typing import Mapping

import dagster as dg

from hyperloom_assets.sensors.release import build_release_sensor
from hyperloom_assets.sensors.target_change import build_target_change_sensor

REFRESH_JOB = "optimize_job"


def build_sensors(partitions: dg.StaticPartitionsDefinition, jobs_by_name: Mapping[str, object]) -> list:
    """`target_change_sensor` and `framework_release_sensor`, both asking for `optimize_job` runs.

    `jobs_by_name`: the code location's jobs by name; every one of them counts when the
    release sensor checks whether a target's host is busy.
    """
    job = jobs_by_name[REFRESH_JOB]
    return [
        build_target_change_sensor(partitions, job),
        build_release_sensor(partitions, job, sorted(jobs_by_name)),
    ]
