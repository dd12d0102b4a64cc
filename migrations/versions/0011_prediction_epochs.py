"""Epochs in the prediction log's id index: its key becomes ``(calibrator_id, epoch_id, prediction_id)``.

Client ids are often random (UUIDs). Keyed ``(calibrator_id, prediction_id)``, each landed on a
random leaf page of the whole index, and once the index outgrew a flush every id dirtied a 16 KiB
page of its own: on SQLite, at 1.3 M ids, ~43 us an id and rising (benchmarks/id_index_keys.py).
With the epoch in the key, a writer fills one epoch's pages at a time (3.3 us an id at any size).
An epoch is closed after ``CALIBRATION_LOG_EPOCH_IDS`` index rows with a Bloom filter of its ids
(``prediction_epochs.bloom``), through which a label is looked up in the epochs that may hold it.

The upgrade puts each calibrator's existing ids in open epochs of 65536 (in chunk order), which
retention closes one by one (``app.prediction_log.service.PredictionLog.apply_retention``). The downgrade
keeps, of an id logged in several epochs, its row of the first chunk: the row a label joins (the
release before wrote no other).

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
EPOCH_IDS = 65536  # ids of the existing index put in one epoch (app.settings' log_epoch_ids)


def _columns(prefix: str) -> str:
    """The index's columns after ``calibrator_id``, each with ``prefix``."""
    return ", ".join(prefix + name for name in COLUMNS.split(", ")[1:])


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


def _swap(with_epoch: bool, select: str) -> None:
    """The index copied into a new table keyed with or without the epoch, which replaces it: SQLite
    cannot change a primary key in place, and on Postgres an update of every row and a new key
    took 21 s for 1 M ids and left the table twice its size (dead rows until a VACUUM FULL)."""
    op.drop_index("ix_logged_predictions_chunk_id", table_name="logged_predictions")
    if op.get_bind().dialect.name != "sqlite":  # the key's index is a relation of its own name there
        op.execute("ALTER TABLE logged_predictions RENAME CONSTRAINT pk_logged_predictions "
                   "TO pk_logged_predictions_old")
    _index_table("logged_predictions_new", with_epoch)
    columns = ("calibrator_id, epoch_id, " if with_epoch else "calibrator_id, ") + COLUMNS.split(", ", 1)[1]
    op.execute(f"INSERT INTO logged_predictions_new ({columns}) {select}")
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
        sqlite_autoincrement=True,
    )
    op.create_index("ix_prediction_epochs_calibrator_id", "prediction_epochs", ["calibrator_id"])
    # the ids logged until now, in open epochs of EPOCH_IDS each per calibrator (in chunk order):
    # retention closes them one by one (each close reads its ids and builds its filter)
    connection = op.get_bind()
    op.create_table("epoch_map_0011", sa.Column("calibrator_id", sa.Integer(), primary_key=True),
                    sa.Column("k", sa.Integer(), primary_key=True), sa.Column("epoch_id", sa.Integer()))
    numbered = ("SELECT l.*, (row_number() OVER (PARTITION BY l.calibrator_id ORDER BY l.chunk_id, l.prediction_id) "
                f"- 1) / {EPOCH_IDS} AS k FROM logged_predictions l")
    groups = connection.execute(sa.text(
        f"SELECT t.calibrator_id, t.k, min(c.created_at), max(c.created_at) FROM ({numbered}) t "
        "JOIN prediction_chunks c ON c.id = t.chunk_id GROUP BY t.calibrator_id, t.k ORDER BY t.calibrator_id, t.k"
    )).all()
    for calibrator_id, k, first, last in groups:
        epoch_id = connection.execute(sa.text(
            "INSERT INTO prediction_epochs (calibrator_id, n_ids, created_at, written_at) "
            "VALUES (:c, 0, :first, :last) RETURNING id"),
            {"c": calibrator_id, "first": first, "last": last}).scalar_one()
        connection.execute(sa.text("INSERT INTO epoch_map_0011 (calibrator_id, k, epoch_id) VALUES (:c, :k, :e)"),
                           {"c": calibrator_id, "k": k, "e": epoch_id})
    joined = f"({numbered}) t JOIN epoch_map_0011 m ON m.calibrator_id = t.calibrator_id AND m.k = t.k"
    _swap(True, f"SELECT t.calibrator_id, m.epoch_id, {_columns('t.')} FROM {joined}")
    op.drop_table("epoch_map_0011")


def downgrade() -> None:
    # of an id in several epochs, the row of its first chunk (the one a label joins), labelled
    # where any of its rows is
    same = ("FROM logged_predictions o WHERE o.calibrator_id = l.calibrator_id "
            "AND o.prediction_id = l.prediction_id")
    labelled = f"EXISTS (SELECT 1 {same} AND o.labelled)"
    # each id's rows found by (calibrator, id), which the key (the epoch second) cannot: without
    # this index (covering both subqueries) the downgrade took 200 s for 65536 ids on SQLite, a
    # scan of the calibrator's rows for each (dropped with the table)
    op.create_index("ix_logged_predictions_0011_first", "logged_predictions",
                    ["calibrator_id", "prediction_id", "chunk_id", "labelled"])
    _swap(False, f"SELECT l.calibrator_id, {_columns('l.').replace('l.labelled', labelled)} FROM logged_predictions l "
                 f"WHERE NOT EXISTS (SELECT 1 {same} AND o.chunk_id < l.chunk_id)")
    op.drop_index("ix_prediction_epochs_calibrator_id", table_name="prediction_epochs")
    op.drop_table("prediction_epochs")
