"""The prediction log's id index without its foreign key to ``calibrators``.

Every row of ``logged_predictions`` names its chunk (``chunk_id``, a foreign key to
``prediction_chunks`` with ``ON DELETE CASCADE``), and the chunk names the same calibrator (its own
key to ``calibrators`` cascades too): the writer inserts the chunk and its index rows together, a
label of a generated id inserts its row with the batch's chunk. So deleting a calibrator deletes its
index rows through its chunks, and a row's calibrator exists while its chunk does; the second key
checked nothing the first does not. It cost Postgres a trigger a row that looks the calibrator up
and locks it: ~2.6 of the ~11 µs a client id costs the database (``benchmarks/id_insert_postgres.py``).

On Postgres the constraint is dropped (and added back by the downgrade); SQLite cannot drop a
constraint, so there the table is copied into one without it (``WITHOUT ROWID`` as before), and
back. Nothing is lost either way.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
lossless_downgrade = ("logged_predictions",)  # the same rows, with the key back

KEY = "fk_logged_predictions_calibrator_id_calibrators"
COLUMNS = "calibrator_id, epoch_id, prediction_id, chunk_id, row, labelled, n_rows, kept"


def _index_table(name: str, calibrator_key: bool) -> None:
    """The id index as 0011 created it, with or without the foreign key to ``calibrators``."""
    op.create_table(
        name,
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("epoch_id", sa.Integer(), nullable=False),
        sa.Column("prediction_id", sa.String(length=128), nullable=False),
        sa.Column("chunk_id", sa.Integer(), nullable=False),
        sa.Column("row", sa.Integer(), nullable=False),
        sa.Column("labelled", sa.Boolean(), nullable=False),
        sa.Column("n_rows", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("kept", sa.LargeBinary(), nullable=True),
        *([sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE", name=KEY)]
          if calibrator_key else []),
        sa.ForeignKeyConstraint(["chunk_id"], ["prediction_chunks.id"], ondelete="CASCADE",
                                name="fk_logged_predictions_chunk_id_prediction_chunks"),
        sa.PrimaryKeyConstraint("calibrator_id", "epoch_id", "prediction_id", name="pk_logged_predictions"),
        sqlite_with_rowid=False,
    )


def _copy_sqlite(calibrator_key: bool) -> None:
    """SQLite: the index copied into a table with or without the key, which replaces it."""
    op.drop_index("ix_logged_predictions_chunk_id", table_name="logged_predictions")
    _index_table("logged_predictions_new", calibrator_key)
    op.execute(f"INSERT INTO logged_predictions_new ({COLUMNS}) SELECT {COLUMNS} FROM logged_predictions")
    op.drop_table("logged_predictions")
    op.rename_table("logged_predictions_new", "logged_predictions")
    op.create_index("ix_logged_predictions_chunk_id", "logged_predictions", ["chunk_id"])


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _copy_sqlite(calibrator_key=False)
    else:
        op.drop_constraint(KEY, "logged_predictions", type_="foreignkey")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _copy_sqlite(calibrator_key=True)
    else:
        op.create_foreign_key(KEY, "logged_predictions", "calibrators", ["calibrator_id"], ["id"], ondelete="CASCADE")
