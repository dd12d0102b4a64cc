"""Observations and the prediction log: labelled rows in binary chunks, logged predictions with
their ids, and each calibrator's logging rate.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # a plain ADD COLUMN (no batch rebuild of the parent table of every version)
    op.add_column("calibrators", sa.Column("log_sample_rate", sa.Float(), nullable=False, server_default="0"))
    op.create_table(
        "observation_chunks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("input_kind", sa.String(length=16), nullable=False),
        sa.Column("n_rows", sa.Integer(), nullable=False),
        sa.Column("n_classes", sa.Integer(), nullable=False),
        sa.Column("dtype", sa.String(length=8), nullable=False),
        sa.Column("class_counts", sa.JSON(), nullable=False),
        sa.Column("inputs", sa.LargeBinary(), nullable=False),
        sa.Column("labels", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE",
                                name=op.f("fk_observation_chunks_calibrator_id_calibrators")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_observation_chunks")),
    )
    op.create_index("ix_observation_chunks_calibrator_created", "observation_chunks",
                    ["calibrator_id", "created_at"])
    op.create_table(
        "prediction_chunks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("input_kind", sa.String(length=16), nullable=False),
        sa.Column("n_rows", sa.Integer(), nullable=False),
        sa.Column("n_classes", sa.Integer(), nullable=False),
        sa.Column("dtype", sa.String(length=8), nullable=False),
        sa.Column("inputs", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE",
                                name=op.f("fk_prediction_chunks_calibrator_id_calibrators")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_prediction_chunks")),
    )
    op.create_index("ix_prediction_chunks_calibrator_created", "prediction_chunks",
                    ["calibrator_id", "created_at"])
    op.create_table(
        "logged_predictions",
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("prediction_id", sa.String(length=128), nullable=False),
        sa.Column("chunk_id", sa.Integer(), nullable=False),
        sa.Column("row", sa.Integer(), nullable=False),
        sa.Column("labelled", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE",
                                name=op.f("fk_logged_predictions_calibrator_id_calibrators")),
        sa.ForeignKeyConstraint(["chunk_id"], ["prediction_chunks.id"], ondelete="CASCADE",
                                name=op.f("fk_logged_predictions_chunk_id_prediction_chunks")),
        sa.PrimaryKeyConstraint("calibrator_id", "prediction_id", name=op.f("pk_logged_predictions")),
        sqlite_with_rowid=False,
    )
    op.create_index("ix_logged_predictions_chunk_id", "logged_predictions", ["chunk_id"])


def downgrade() -> None:
    op.drop_index("ix_logged_predictions_chunk_id", table_name="logged_predictions")
    op.drop_table("logged_predictions")
    op.drop_index("ix_prediction_chunks_calibrator_created", table_name="prediction_chunks")
    op.drop_table("prediction_chunks")
    op.drop_index("ix_observation_chunks_calibrator_created", table_name="observation_chunks")
    op.drop_table("observation_chunks")
    op.drop_column("calibrators", "log_sample_rate")  # SQLite >= 3.35 drops a column in place
