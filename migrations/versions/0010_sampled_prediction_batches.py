"""Sampled batches of generated ids as one ``logged_predictions`` row too (``kept``).

Revision 0009 made a batch of generated ids logged in full one row (``<prefix>,``, its first chunk
row in ``row``, its size in ``n_rows``). A batch logged at a sampling rate below 1 still wrote one
row per kept id, and at 10% those B-tree inserts were most of what the log cost the server
(benchmarks/prediction_log.py). Now such a batch is one row as well: ``kept`` holds the numbers
of the ids kept (their ``i`` in ``<prefix>-<i>``) as sorted little-endian uint32, the ``j``-th of
them at chunk row ``row + j``, and ``n_rows`` counts them. ``kept`` is null for a batch logged in
full and for every other row. The downgrade writes one row per kept id again.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# tables whose rows the downgrade rewrites in the old form without losing any (app.platform.migrate's check)
lossless_downgrade = ("logged_predictions",)

EXPAND = 5000  # ids written per statement by the downgrade


def upgrade() -> None:
    op.add_column("logged_predictions", sa.Column("kept", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    connection = op.get_bind()
    batches = connection.execute(sa.text(
        "SELECT calibrator_id, prediction_id, chunk_id, row, kept FROM logged_predictions WHERE kept IS NOT NULL"
    )).all()
    # a labelled id of the batch already has its own row (``n_rows`` 0: the batch row counted it):
    # it keeps that row, which now stands for itself
    insert = sa.text("INSERT INTO logged_predictions (calibrator_id, prediction_id, chunk_id, row, labelled, n_rows) "
                     "VALUES (:calibrator_id, :prediction_id, :chunk_id, :row, false, 1) "
                     "ON CONFLICT (calibrator_id, prediction_id) DO UPDATE SET n_rows = 1 "
                     "WHERE logged_predictions.n_rows = 0")
    for calibrator_id, key, chunk_id, first, kept in batches:
        prefix = key[:-1]
        numbers = np.frombuffer(kept, dtype="<u4")
        rows = [{"calibrator_id": calibrator_id, "prediction_id": f"{prefix}{i}", "chunk_id": chunk_id,
                 "row": first + j} for j, i in enumerate(numbers.tolist())]
        for start in range(0, len(rows), EXPAND):
            connection.execute(insert, rows[start:start + EXPAND])
        connection.execute(sa.text("DELETE FROM logged_predictions WHERE calibrator_id = :c AND prediction_id = :p"),
                           {"c": calibrator_id, "p": key})
    op.drop_column("logged_predictions", "kept")
