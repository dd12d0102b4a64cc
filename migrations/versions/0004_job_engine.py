"""Jobs on an engine: job states, steps and inputs; idempotency keys; Procrastinate's schema on
Postgres (its tables, types and functions, from the pinned ``procrastinate`` package).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("calibrator", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("step", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("worker", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("request", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("payload", sa.LargeBinary(), nullable=True))
        batch.create_index("ix_jobs_calibrator", ["calibrator"])
        batch.create_index("ix_jobs_status_created_at", ["status", "created_at"])
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("cancel_requested", server_default=None)
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(length=300), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("response", sa.LargeBinary(), nullable=True),
        sa.Column("headers", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "key", name=op.f("pk_idempotency_keys")),
    )
    op.create_index(op.f("ix_idempotency_keys_created_at"), "idempotency_keys", ["created_at"])
    if op.get_bind().dialect.name == "postgresql":
        from procrastinate.schema import SchemaManager

        # psycopg's own execute, with no parameters: the schema's '%' are not placeholders
        op.get_bind().connection.driver_connection.execute(SchemaManager.get_schema())


PROCRASTINATE_OBJECTS = """
SELECT 'DROP TABLE IF EXISTS ' || string_agg(quote_ident(tablename), ', ') || ' CASCADE'
  FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'procrastinate%'
UNION ALL
SELECT 'DROP FUNCTION IF EXISTS ' || string_agg(p.oid::regprocedure::text, ', ') || ' CASCADE'
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema() AND p.proname LIKE 'procrastinate%'
UNION ALL
SELECT 'DROP TYPE IF EXISTS ' || string_agg(quote_ident(t.typname), ', ') || ' CASCADE'
  FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
 WHERE n.nspname = current_schema() AND t.typname LIKE 'procrastinate%'
   AND (t.typtype = 'e' OR t.typrelid IN (SELECT oid FROM pg_class WHERE relkind = 'c'))
"""


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        connection = bind.connection.driver_connection  # psycopg's own: '%' is no placeholder
        for (statement,) in connection.execute(PROCRASTINATE_OBJECTS).fetchall():
            if statement:
                connection.execute(statement)
    op.drop_index(op.f("ix_idempotency_keys_created_at"), table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    op.execute("DELETE FROM jobs WHERE status NOT IN ('running', 'succeeded', 'failed')")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_status_created_at")
        batch.drop_index("ix_jobs_calibrator")
        for column in ("payload", "request", "cancel_requested", "finished_at", "started_at", "worker", "step",
                       "calibrator"):
            batch.drop_column(column)
