"""Where each measurement of a report sits under its own roofline ceiling. Pure code.

A throughput above the ceiling is physically impossible: the hardware figures, the
model shape or the measurement is wrong, and every "% of roofline" built on it with it.
Each measurement is held to the ceiling of its own launch (its concurrency, its KV
dtype), so a sweep rung at four times the workload's concurrency is not judged by the
workload's ceiling.
"""

from __future__ import annotations

from typing import Any

from hyperloom_assets.core.models import Frozen
from hyperloom_assets.core.roofline.model_shape import ModelShape
from hyperloom_assets.core.roofline.roofline import Hardware, Roofline, ceiling_for_launch


class Position(Frozen):
    measurement_id: int
    kind: str  # baseline | trial | best_relaunch | validation | sweep
    fingerprint: str | None
    concurrency: int
    output_throughput: float
    ceiling_tok_s: float
    binding: str

    @property
    def of_ceiling_pct(self) -> float:
        return 100.0 * self.output_throughput / self.ceiling_tok_s

    @property
    def above(self) -> bool:
        return self.output_throughput > self.ceiling_tok_s


def report_rows(rows: list[dict[str, Any]], context_key: str, since_id: int, replayed_ids: set[int]) -> list[dict]:
    """The stored measurements a report draws on: those of its context from its baseline on,
    plus the replayed trials' own (measured by an earlier run), failed launches left out."""
    return [row for row in rows if row["measurement"] and row["context_key"] == context_key
            and (row["id"] >= since_id or row["id"] in replayed_ids)]


def positions(rows: list[dict[str, Any]], shape: ModelShape, hardware: Hardware,
              workload_roofline: Roofline) -> tuple[list[Position], list[int]]:
    """Each row against its launch's ceiling; the ids of rows that say no concurrency."""
    found, unjudged = [], []
    for row in rows:
        concurrency = (row["measurement"].get("workload") or {}).get("concurrency")
        if concurrency is None:
            unjudged.append(row["id"])
            continue
        ceiling = ceiling_for_launch(shape, hardware, workload_roofline, int(concurrency), row["argv"])
        found.append(Position(measurement_id=row["id"], kind=row["kind"], fingerprint=row["fingerprint"],
                              concurrency=int(concurrency), output_throughput=row["measurement"]["output_throughput"],
                              ceiling_tok_s=ceiling.ceiling_tok_s, binding=ceiling.binding))
    return found, unjudged
