"""Dagster metadata values for what pure code builds (typed tables)."""

import dagster as dg

from hyperloom_assets.core.report.tables import Table


def table_value(table: Table) -> dg.TableMetadataValue:
    """A typed table the UI shows with its column types and descriptions."""
    schema = dg.TableSchema(columns=[dg.TableColumn(c.name, c.type, description=c.description) for c in table.columns])
    return dg.MetadataValue.table(records=[dg.TableRecord(row) for row in table.rows], schema=schema)
