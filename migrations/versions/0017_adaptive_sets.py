"""Adaptive set thresholds: per set predictor fitted with ``adaptive`` and coverage level, the state
of its online conformal predictor (ACI or DtACI) as JSON, the level it serves now, the rows it was
updated on and the newest observation chunk it applied. The downgrade drops the table (the states
are lost: the set predictors themselves are kept, and serve their split-conformal thresholds).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "adaptive_sets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("set_predictor_id", sa.Integer(), nullable=False),
        sa.Column("coverage", sa.Float(), nullable=False),
        sa.Column("method", sa.String(length=16), nullable=False),
        sa.Column("level", sa.Float(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("n_rows", sa.Integer(), nullable=False),
        sa.Column("covered_rows", sa.Integer(), nullable=False),
        sa.Column("last_chunk_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["set_predictor_id"], ["set_predictors.id"],
                                name="fk_adaptive_sets_set_predictor_id_set_predictors", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_adaptive_sets"),
        sa.UniqueConstraint("set_predictor_id", "coverage", name="uq_adaptive_sets_level"),
    )


def downgrade() -> None:
    op.drop_table("adaptive_sets")
