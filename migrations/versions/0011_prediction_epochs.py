"""Epochs in the prediction log's id index: its key becomes ``(calibrator_id, epoch_id, prediction_id)``.

Client ids are often random (UUIDs). Keyed ``(calibrator_id, prediction_id)``, each landed on a
random leaf page of the whole index, and once the index outgrew a flush every id dirtied a 16 KiB
page of its own: on SQLite, at 1.3 M ids, ~43 us an id and rising (benchmarks/id_index_keys.py).
With the epoch in the key, a writer fills one epoch's pages at a time (3.3 us an id at any size).
An epoch is closed after ``CALIBRATION_LOG_EPOCH_IDS`` ids (or an hour) with a Bloom filter of its
ids (``prediction_epochs.bloom``), through which a label is looked up in the epochs that may hold it.

The upgrade puts each calibrator's existing ids in one open epoch of its own (retention closes it,
``app.prediction_epochs.close_stale``). The downgrade keeps, of an id logged in several epochs,
its row in the first: the row a label joins (the release before wrote no other).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# the downgrade rewrites the id index in the old form, keeping the rows a label joins; the epochs
# (ranges of it, and filters built from it) carry nothing of their own
lossless_downgrade = ("logged_predictions", "prediction_epochs")

COLUMNS = "calibrator_id, prediction_id, chunk_id, row, labelled, n_rows, kept"


def _index_table(name: str, with_epoch: bool) -> None:
    """The id index as created by 0006 and altered by 0009 and 0010, with ``epoch_id`` in its key or not."""
    key = ["calibrator_id", "epoch_id", "prediction_id"] if with_epoch else ["calibrator_id", "prediction_id"]
    op.create_table(
        name,
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        *([sa.Column("epoch_id", sa.Integer(), nullable=False)] if with_epoch else []),
        sa.Column("prediction_id", sa.String(length=128), nullable=False),
        sa.Column("chunk_id", sa.Integer(), nullable=False),
        sa.Column("row", sa.Integer(), nullable=False),
        sa.Column("labelled", sa.Boolean(), nullable=False),
        sa.Column("n_rows", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("kept", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE",
                                name="fk_logged_predictions_calibrator_id_calibrators"),
        sa.ForeignKeyConstraint(["chunk_id"], ["prediction_chunks.id"], ondelete="CASCADE",
                                name="fk_logged_predictions_chunk_id_prediction_chunks"),
        sa.PrimaryKeyConstraint(*key, name="pk_logged_predictions"),
        sqlite_with_rowid=False,
    )


def _swap_sqlite(with_epoch: bool, select: str) -> None:
    """SQLite cannot change a primary key in place: the index is copied into a new table."""
    _index_table("logged_predictions_new", with_epoch)
    columns = ("calibrator_id, epoch_id, " if with_epoch else "calibrator_id, ") + COLUMNS.split(", ", 1)[1]
    op.execute(f"INSERT INTO logged_predictions_new ({columns}) {select}")
    op.drop_index("ix_logged_predictions_chunk_id", table_name="logged_predictions")
    op.drop_table("logged_predictions")
    op.rename_table("logged_predictions_new", "logged_predictions")
    op.create_index("ix_logged_predictions_chunk_id", "logged_predictions", ["chunk_id"])


def upgrade() -> None:
    op.create_table(
        "prediction_epochs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("calibrator_id", sa.Integer(), nullable=False),
        sa.Column("n_ids", sa.Integer(), nullable=False),
        sa.Column("bloom", sa.LargeBinary(), nullable=True),
        sa.Column("bloom_hashes", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("written_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["calibrator_id"], ["calibrators.id"], ondelete="CASCADE",
                                name="fk_prediction_epochs_calibrator_id_calibrators"),
        sa.PrimaryKeyConstraint("id", name="pk_prediction_epochs"),
    )
    op.create_index("ix_prediction_epochs_calibrator_id", "prediction_epochs", ["calibrator_id"])
    # one open epoch per calibrator with logged ids, for the ids logged until now
    op.execute("INSERT INTO prediction_epochs (calibrator_id, n_ids, created_at, written_at) "
               "SELECT l.calibrator_id, count(*), min(c.created_at), max(c.created_at) FROM logged_predictions l "
               "JOIN prediction_chunks c ON c.id = l.chunk_id GROUP BY l.calibrator_id")
    epoch_of = "(SELECT min(e.id) FROM prediction_epochs e WHERE e.calibrator_id = logged_predictions.calibrator_id)"
    if op.get_bind().dialect.name == "sqlite":
        _swap_sqlite(True, f"SELECT calibrator_id, {epoch_of}, {COLUMNS.split(', ', 1)[1]} FROM logged_predictions")
    else:
        op.add_column("logged_predictions", sa.Column("epoch_id", sa.Integer(), nullable=True))
        op.execute(f"UPDATE logged_predictions SET epoch_id = {epoch_of}")
        op.alter_column("logged_predictions", "epoch_id", nullable=False)
        op.drop_constraint("pk_logged_predictions", "logged_predictions", type_="primary")
        op.create_primary_key("pk_logged_predictions", "logged_predictions",
                              ["calibrator_id", "epoch_id", "prediction_id"])


def downgrade() -> None:
    # of an id in several epochs, the row in its first epoch (the one a label joins)
    if op.get_bind().dialect.name == "sqlite":
        # SQLite takes a bare column's value from the row whose min() the group reports
        rest = COLUMNS.split(", ", 2)[2]
        _swap_sqlite(False, f"SELECT calibrator_id, prediction_id, {rest} FROM (SELECT min(epoch_id), calibrator_id, "
                            f"prediction_id, {rest} FROM logged_predictions GROUP BY calibrator_id, prediction_id)")
    else:
        op.execute("DELETE FROM logged_predictions l USING (SELECT calibrator_id, prediction_id, min(epoch_id) AS e "
                   "FROM logged_predictions GROUP BY calibrator_id, prediction_id HAVING count(*) > 1) d "
                   "WHERE l.calibrator_id = d.calibrator_id AND l.prediction_id = d.prediction_id AND l.epoch_id > d.e")
        op.drop_constraint("pk_logged_predictions", "logged_predictions", type_="primary")
        op.create_primary_key("pk_logged_predictions", "logged_predictions", ["calibrator_id", "prediction_id"])
        op.drop_column("logged_predictions", "epoch_id")
    op.drop_index("ix_prediction_epochs_calibrator_id", table_name="prediction_epochs")
    op.drop_table("prediction_epochs")
