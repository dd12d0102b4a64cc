"""The whole first schema: calibrators, their versions, aliases.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "calibrators",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("last_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibrators")),
        sa.UniqueConstraint("name", name=op.f("uq_calibrators_name")),
    )
    op.create_table(
        "calibrator_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("method", sa.String(length=64), nullable=False),
        sa.Column("input_kind", sa.String(length=16), nullable=False),
        sa.Column("n_classes", sa.Integer(), nullable=False),
        sa.Column("n_samples", sa.Integer(), nullable=False),
        sa.Column("class_names", sa.JSON(), nullable=True),
        sa.Column("params_json", sa.Text(), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=False),
        sa.Column("summary", sa.JSON(), nullable=False),
        sa.Column("diagnostics", sa.JSON(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=True),
        sa.Column("tensor_names", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE",
                                name=op.f("fk_calibrator_versions_calibrator_id_calibrators")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibrator_versions")),
        sa.UniqueConstraint("calibrator_id", "version", name="uq_calibrator_versions_number"),
    )
    op.create_index(op.f("ix_calibrator_versions_calibrator_id"), "calibrator_versions",
                    ["calibrator_id"], unique=False)
    op.create_table(
        "aliases",
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE",
                                name=op.f("fk_aliases_calibrator_id_calibrators")),
        sa.ForeignKeyConstraint(["calibrator_id", "version"],
                                ["calibrator_versions.calibrator_id", "calibrator_versions.version"],
                                name="fk_aliases_version_calibrator_versions"),
        sa.PrimaryKeyConstraint("calibrator_id", "alias", name=op.f("pk_aliases")),
    )


def downgrade() -> None:
    op.drop_table("aliases")
    op.drop_index(op.f("ix_calibrator_versions_calibrator_id"), table_name="calibrator_versions")
    op.drop_table("calibrator_versions")
    op.drop_table("calibrators")
