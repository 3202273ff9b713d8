"""The recipe memory in the result store's database (SQLite by default, Postgres in a fleet).

`recipes`: one row per keeper of a validated stack, filed under its target's class key
(core/planning/recipes.py). `recipe_misses`: a recipe that did not win on a target of a
class, so it is not offered to that class again. The tables are created on first use.
"""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa

from hyperloom_assets.core.planning.recipes import Recipe
from hyperloom_assets.resources.store.database import ExtraTables

METADATA = sa.MetaData()

RECIPES = sa.Table(
    "recipes", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("class_key", sa.String, nullable=False, index=True),
    sa.Column("target", sa.String, nullable=False),
    sa.Column("run_id", sa.String, nullable=False),
    sa.Column("name", sa.String, nullable=False),
    sa.Column("gain_pct", sa.Float, nullable=False),
    sa.Column("record", sa.Text, nullable=False),  # JSON Recipe (without its id)
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

RECIPE_MISSES = sa.Table(
    "recipe_misses", METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("recipe_id", sa.Integer, nullable=False, index=True),
    sa.Column("class_key", sa.String, nullable=False),
    sa.Column("target", sa.String, nullable=False),
    sa.Column("run_id", sa.String),
    sa.Column("outcome", sa.String, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)


class RecipeBook(ExtraTables):
    metadata = METADATA

    def file(self, recipes: list[Recipe]) -> None:
        """File a validated stack's keepers; a run that files again (a replay) adds nothing."""
        now = datetime.now(timezone.utc)
        with self.writing(f"{len(recipes)} recipe(s)") as conn:
            for recipe in recipes:
                exists = conn.execute(sa.select(RECIPES.c.id).where(
                    RECIPES.c.class_key == recipe.klass.key, RECIPES.c.run_id == recipe.run_id,
                    RECIPES.c.name == recipe.name)).first()
                if exists is None:
                    conn.execute(RECIPES.insert().values(
                        class_key=recipe.klass.key, target=recipe.target, run_id=recipe.run_id, name=recipe.name,
                        gain_pct=recipe.gain_pct, record=recipe.model_dump_json(exclude={"id"}), created_at=now))

    def offered(self, class_key: str) -> list[Recipe]:
        """The class's recipes, best first, less those that missed on a target of the class."""
        missed = sa.select(RECIPE_MISSES.c.recipe_id).where(RECIPE_MISSES.c.class_key == class_key)
        query = (sa.select(RECIPES).where(RECIPES.c.class_key == class_key, RECIPES.c.id.not_in(missed))
                 .order_by(RECIPES.c.gain_pct.desc(), RECIPES.c.id))
        with self.engine().connect() as conn:
            return [Recipe.model_validate_json(row.record).model_copy(update={"id": row.id})
                    for row in conn.execute(query)]

    def mark_missed(self, recipe_id: int, class_key: str, target: str, run_id: str | None, outcome: str) -> None:
        with self.writing(f"recipe {recipe_id} missed on {target}") as conn:
            conn.execute(RECIPE_MISSES.insert().values(recipe_id=recipe_id, class_key=class_key, target=target,
                                                       run_id=run_id, outcome=outcome,
                                                       created_at=datetime.now(timezone.utc)))

    def misses(self, class_key: str) -> list[dict]:
        query = sa.select(RECIPE_MISSES).where(RECIPE_MISSES.c.class_key == class_key).order_by(RECIPE_MISSES.c.id)
        with self.engine().connect() as conn:
            return [dict(row._mapping) for row in conn.execute(query)]
