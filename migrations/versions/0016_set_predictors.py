"""Conformal set predictors of calibrator versions (``app.conformal.rows``): one row per set
predictor, its thresholds for every fitted coverage level as canonical JSON, where its held-out
rows came from, and a digest of every stored column; deleted with its version. The downgrade drops
the table (its rows are lost: ``calibration-service migrate`` names them before it downgrades).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "set_predictors",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("score", sa.String(length=16), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("coverage", sa.JSON(), nullable=False),
        sa.Column("params_json", sa.Text(), nullable=False),
        sa.Column("source", sa.JSON(), nullable=False),
        sa.Column("n_samples", sa.Integer(), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["calibrator_versions.id"],
                                name="fk_set_predictors_version_id_calibrator_versions", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_set_predictors"),
    )
    op.create_index("ix_set_predictors_version_id", "set_predictors", ["version_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_set_predictors_version_id", table_name="set_predictors")
    op.drop_table("set_predictors")
