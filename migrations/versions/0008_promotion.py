"""Safe promotion (issue #21): calibrator settings (what an unversioned /v2 call serves), alias
gates, the history of alias moves, stored challenger evaluations, and refit policies.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _calibrator_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE",
                                   name=op.f(f"fk_{table}_calibrator_id_calibrators"))


def upgrade() -> None:
    op.create_table(
        "calibrator_settings",
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("v2_default", sa.String(length=64), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        _calibrator_fk("calibrator_settings"),
        sa.PrimaryKeyConstraint("calibrator_id", name=op.f("pk_calibrator_settings")),
    )
    op.create_table(
        "alias_gates",
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("require_evaluation", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        _calibrator_fk("alias_gates"),
        sa.PrimaryKeyConstraint("calibrator_id", "alias", name=op.f("pk_alias_gates")),
    )
    op.create_table(
        "alias_moves",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("from_version", sa.Integer(), nullable=True),
        sa.Column("to_version", sa.Integer(), nullable=True),
        sa.Column("actor", sa.String(length=64), nullable=True),
        sa.Column("evaluation_id", sa.String(length=32), nullable=True),
        sa.Column("moved_at", sa.DateTime(timezone=True), nullable=False),
        _calibrator_fk("alias_moves"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alias_moves")),
    )
    op.create_index("ix_alias_moves_calibrator_alias", "alias_moves", ["calibrator_id", "alias", "id"])
    op.create_table(
        "evaluations",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("challenger", sa.Integer(), nullable=False),
        sa.Column("champion", sa.Integer(), nullable=False),
        sa.Column("alpha", sa.Float(), nullable=False),
        sa.Column("n_rows", sa.Integer(), nullable=False),
        sa.Column("verdict", sa.String(length=32), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        _calibrator_fk("evaluations"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evaluations")),
    )
    op.create_index("ix_evaluations_calibrator_created", "evaluations", ["calibrator_id", "created_at"])
    op.create_table(
        "refit_policies",
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_job_id", sa.String(length=32), nullable=True),
        _calibrator_fk("refit_policies"),
        sa.PrimaryKeyConstraint("calibrator_id", name=op.f("pk_refit_policies")),
    )


def downgrade() -> None:
    op.drop_table("refit_policies")
    op.drop_index("ix_evaluations_calibrator_created", table_name="evaluations")
    op.drop_table("evaluations")
    op.drop_index("ix_alias_moves_calibrator_alias", table_name="alias_moves")
    op.drop_table("alias_moves")
    op.drop_table("alias_gates")
    op.drop_table("calibrator_settings")
