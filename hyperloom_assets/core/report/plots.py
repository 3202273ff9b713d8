"""Sweep plots as PNG: throughput against concurrency and against interactivity. Pure code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on a server; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402


def _series(rows: list[dict[str, Any]], config: str, x: str) -> tuple[list[float], list[float]]:
    points = sorted((row[x], row["output_throughput"]) for row in rows if row["config"] == config)
    return [p[0] for p in points], [p[1] for p in points]


def _plot(rows: list[dict[str, Any]], x: str, xlabel: str, title: str, path: Path, log_x: bool) -> Path:
    figure, axes = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    for config, marker in (("baseline", "o"), ("stack", "s")):
        xs, ys = _series(rows, config, x)
        if xs:
            axes.plot(xs, ys, marker=marker, label=config)
    if log_x:
        axes.set_xscale("log", base=2)
    axes.set_xlabel(xlabel)
    axes.set_ylabel("output tokens/s")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def plot_sweep(rows: list[dict[str, Any]], folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [
        _plot(rows, "concurrency", "concurrency", "Throughput vs concurrency", folder / "throughput_vs_concurrency.png", True),
        _plot(rows, "interactivity", "interactivity (tokens/s per user)", "Throughput vs interactivity",
              folder / "throughput_vs_interactivity.png", False),
    ]
