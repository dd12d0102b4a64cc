"""Drift monitors: each served version's anytime-valid e-processes (on its labelled and on its
logged predictions) and their alarms (issue #20).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "drift_monitors",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("signal", sa.String(length=16), nullable=False),
        sa.Column("alpha", sa.Float(), nullable=False),
        sa.Column("tolerance", sa.Float(), nullable=False),
        sa.Column("n_rows", sa.Integer(), nullable=False),
        sa.Column("last_chunk_id", sa.Integer(), nullable=False),
        sa.Column("log_e_value", sa.Float(), nullable=False),
        sa.Column("max_log_e_value", sa.Float(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("ece", sa.Float(), nullable=True),
        sa.Column("ece_rows", sa.Integer(), nullable=False),
        sa.Column("alarm_rows", sa.Integer(), nullable=True),
        sa.Column("alarmed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("evaluated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE",
                                name=op.f("fk_drift_monitors_calibrator_id_calibrators")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_drift_monitors")),
        sa.UniqueConstraint("calibrator_id", "version", "signal", name="uq_drift_monitors_version"),
    )


def downgrade() -> None:
    op.drop_table("drift_monitors")
