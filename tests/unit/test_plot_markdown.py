"""Plots in the UI: Markdown metadata that holds each PNG itself, since the browser showing the
UI cannot read the host's disk."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from hyperloom_assets.assets.metadata import plots_value, with_embedded_plots
from hyperloom_assets.core.report.plots import plot_sweep

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EMBEDDED = re.compile(r"!\[([^\]]*)\]\(data:image/png;base64,([A-Za-z0-9+/=]+)\)")


def embedded_pngs(markdown: str) -> dict[str, bytes]:
    """Each embedded image's alt text and its decoded bytes, which must be a PNG."""
    images = {alt: base64.b64decode(data, validate=True) for alt, data in EMBEDDED.findall(markdown)}
    assert all(png.startswith(PNG_SIGNATURE) for png in images.values()), "every embedded image decodes to a PNG"
    return images


def sweep_plots(folder: Path) -> list[Path]:
    rows = [{"config": config, "concurrency": c, "output_throughput": t * c, "interactivity": 1000.0 / (10 + c)}
            for config, t in (("baseline", 10.0), ("stack", 12.0)) for c in (4, 16)]
    return plot_sweep(rows, folder)


def test_the_plots_value_embeds_every_plot_as_the_png_on_disk(tmp_path) -> None:
    plots = sweep_plots(tmp_path)
    images = embedded_pngs(plots_value(plots).value)
    assert images == {path.name: path.read_bytes() for path in plots}


def test_the_reports_links_to_its_plots_become_the_plots_and_nothing_else_changes(tmp_path) -> None:
    plots = sweep_plots(tmp_path)
    names = [path.name for path in plots]
    markdown = f"# Report\n\n![{names[0]}]({names[0]})\n\ntext\n\n![{names[1]}]({names[1]})\n\n![gone.png](gone.png)\n"
    shown = with_embedded_plots(markdown, tmp_path)
    assert embedded_pngs(shown) == {path.name: path.read_bytes() for path in plots}
    assert "![gone.png](gone.png)" in shown, "a link to no file stays a link"
    assert EMBEDDED.sub("IMAGE", shown) == "# Report\n\nIMAGE\n\ntext\n\nIMAGE\n\n![gone.png](gone.png)\n"
