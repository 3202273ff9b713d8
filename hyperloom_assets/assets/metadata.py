"""Dagster metadata values for what pure code builds (typed tables, plots the UI shows)."""

import base64
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg

from hyperloom_assets.core.report.tables import Table
from hyperloom_assets.core.secrets import Redactor

# A Markdown image whose target is a relative PNG file name, as the report links its plots.
PNG_LINK = re.compile(r"!\[([^\]]*)\]\(([^()\s:]+\.png)\)")


def table_value(table: Table, secrets: Redactor | None = None) -> dg.TableMetadataValue:
    """A typed table the UI shows with its column types and descriptions; `secrets`: its text cells redacted."""
    if secrets is not None:
        table = Table(columns=table.columns, rows=[secrets.value(row) for row in table.rows])
    schema = dg.TableSchema(columns=[dg.TableColumn(c.name, c.type, description=c.description) for c in table.columns])
    return dg.MetadataValue.table(records=[dg.TableRecord(row) for row in table.rows], schema=schema)


def png_image(path: Path, alt: str | None = None) -> str:
    """A Markdown image holding the PNG itself: the UI runs in a browser that cannot read the
    host's disk, and its Markdown renderer accepts `data:` images."""
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"![{path.name if alt is None else alt}](data:image/png;base64,{encoded})"


def plots_value(plots: list[Path]) -> dg.MarkdownMetadataValue:
    """The plots, embedded one under the other, for the UI (the path metadata names the files)."""
    return dg.MetadataValue.md("\n\n".join(png_image(Path(p)) for p in plots))


def with_embedded_plots(markdown: str, folder: Path) -> str:
    """`markdown` with each image link to a PNG in `folder` replaced by the embedded PNG; the
    file on disk keeps its links, which resolve beside it."""

    def embedded(link: re.Match) -> str:
        path = folder / link.group(2)
        return png_image(path, link.group(1)) if path.is_file() else link.group(0)

    return PNG_LINK.sub(embedded, markdown)


def run_secrets(env: Mapping[str, str] | None = None, argv: Sequence[str] | None = None) -> Redactor:
    """What a step's metadata, observations and log lines must not show (core/secrets.py): the
    secrets of the launch's env and argv (the target's) and of this process's environment."""
    return Redactor.of(env=env, argv=argv, environ=os.environ)


def argv_text(argv: Sequence[str], secrets: Redactor) -> dg.TextMetadataValue:
    """A server command, shell-quoted, its secrets `<redacted>`."""
    return dg.MetadataValue.text(shlex.join(secrets.argv(argv)))
