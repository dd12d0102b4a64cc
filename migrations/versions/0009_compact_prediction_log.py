"""A compact prediction log: one ``logged_predictions`` row stands for a whole batch of generated
ids (``n_rows``), instead of one row per id.

Generated ids are a random prefix and the row number (``3f9c…-0``, ``3f9c…-1``, …): a batch of
them logged in full is one row keyed ``<prefix>,`` (no client id holds a comma) with the chunk row
of its first id in ``row`` and its size in ``n_rows``. A client id keeps its own row (``n_rows``
1), and so does a generated id once labelled (``n_rows`` 0: the batch row still counts it). Rows
written before this revision are client-style rows and read as before. The downgrade writes one
row per id again.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# tables whose rows the downgrade rewrites in the old form without losing any (app.platform.migrate's check)
lossless_downgrade = ("logged_predictions",)

EXPAND = 5000  # ids written per statement by the downgrade


def upgrade() -> None:
    # a plain ADD COLUMN on both databases (existing rows stand for one id each)
    op.add_column("logged_predictions", sa.Column("n_rows", sa.Integer(), nullable=False, server_default="1"))


def downgrade() -> None:
    connection = op.get_bind()
    batches = connection.execute(sa.text(
        "SELECT calibrator_id, prediction_id, chunk_id, row, n_rows FROM logged_predictions "
        "WHERE n_rows > 1 OR prediction_id LIKE '%,'")).all()
    insert = sa.text("INSERT INTO logged_predictions (calibrator_id, prediction_id, chunk_id, row, labelled, n_rows) "
                     "VALUES (:calibrator_id, :prediction_id, :chunk_id, :row, false, 1) "
                     "ON CONFLICT (calibrator_id, prediction_id) DO NOTHING")
    for calibrator_id, key, chunk_id, first, n in batches:
        prefix = key[:-1]  # labelled ids of the batch already have their row: they keep it
        rows = [{"calibrator_id": calibrator_id, "prediction_id": f"{prefix}{i}", "chunk_id": chunk_id,
                 "row": first + i} for i in range(n)]
        for start in range(0, n, EXPAND):
            connection.execute(insert, rows[start:start + EXPAND])
        connection.execute(sa.text("DELETE FROM logged_predictions WHERE calibrator_id = :c AND prediction_id = :p"),
                           {"c": calibrator_id, "p": key})
    op.drop_column("logged_predictions", "n_rows")  # SQLite >= 3.35 drops a column in place
