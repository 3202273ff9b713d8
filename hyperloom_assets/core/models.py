"""The one base of the project's pydantic models. Pure code.

Every model refuses unknown fields (`extra="forbid"`), so a typo in a target file, a
stored record or a run config is an error that names the field, never a silent default.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A model that refuses unknown fields."""

    model_config = ConfigDict(extra="forbid")


class Frozen(Strict):
    """A strict model whose instances are immutable (tables, specs, ceilings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
