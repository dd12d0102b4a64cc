"""Webhook deliveries and idempotency leases: an outbox of drift alarms to POST (one row per new
alarm and URL, with its stable delivery id, attempts, next attempt time, last error and state),
and on each idempotency claim the owner holding it and when its lease lapses.

Revision ID: 0013
Revises: 0011
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# a lease only matters while its request runs: the downgrade keeps every claim and stored answer
lossless_downgrade = ("idempotency_keys",)


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("signal", sa.String(length=16), nullable=False),
        sa.Column("alarm_rows", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("message", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.String(length=500), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE",
                                name="fk_webhook_deliveries_calibrator_id_calibrators"),
        sa.PrimaryKeyConstraint("id", name="pk_webhook_deliveries"),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["state", "next_attempt_at"])
    op.create_index("ix_webhook_deliveries_calibrator", "webhook_deliveries", ["calibrator_id", "created_at"])
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.drop_column("lease_expires_at")
        batch.drop_column("owner")
    op.drop_index("ix_webhook_deliveries_calibrator", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
