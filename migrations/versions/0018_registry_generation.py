"""The registry's generation: one row whose counter every commit that changes what a reference
resolves to moves, in that commit's own transaction, so a process can tell with one primary-key
read that its remembered resolutions still hold (``app.registry.cache.Resolutions``).

On Postgres, constraint triggers deferred to the commit bump it for every row written in
``calibrators`` (inserted, deleted, or its ``name`` or ``log_sample_rate`` updated: the prediction
log's counters in the same row do not count), ``calibrator_versions``, ``aliases`` and
``calibrator_settings``: any writer, this service's or not, is counted. Deferred to the commit, the
counter's row lock is the transaction's last, so two writers never deadlock on it. SQLite has a
change counter of its own (``PRAGMA data_version``): there the table is created but no trigger is.
The downgrade drops the triggers and the table; nothing is lost (the counter is derived).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
lossless_downgrade = ("registry_generation",)

# (table, the events that change a resolution)
WATCHED = (("calibrators", "INSERT OR DELETE OR UPDATE OF id, name, log_sample_rate"),
           ("calibrator_versions", "INSERT OR DELETE OR UPDATE"),
           ("aliases", "INSERT OR DELETE OR UPDATE"),
           ("calibrator_settings", "INSERT OR DELETE OR UPDATE"))
BUMP = """
CREATE FUNCTION bump_registry_generation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE registry_generation SET generation = generation + 1 WHERE id = 1;
    RETURN NULL;
END $$
"""


def upgrade() -> None:
    generation = op.create_table(
        "registry_generation",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_registry_generation"),
    )
    op.bulk_insert(generation, [{"id": 1, "generation": 0}])
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(BUMP)
    for table, events in WATCHED:
        op.execute(f"CREATE CONSTRAINT TRIGGER registry_generation_{table} AFTER {events} ON {table} "
                   "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bump_registry_generation()")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, _ in WATCHED:
            op.execute(f"DROP TRIGGER IF EXISTS registry_generation_{table} ON {table}")
        op.execute("DROP FUNCTION IF EXISTS bump_registry_generation()")
    op.drop_table("registry_generation")
