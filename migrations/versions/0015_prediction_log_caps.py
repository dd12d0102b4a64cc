"""The prediction log's per-name cap: each calibrator counts the rows its log holds
(``logged_rows``, kept by the writer as it writes and by retention as it deletes, so that the cap
``CALIBRATION_MAX_LOGGED_ROWS`` is checked without summing the chunks) and the rows its log did
not take because it was full (``log_dropped_rows``). The upgrade sets ``logged_rows`` from the
chunks there are; the downgrade drops both (the count is derived from the chunks, the dropped rows
are a statistic: the calibrators themselves are kept whole).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
lossless_downgrade = ("calibrators",)  # see the docstring: a count derived from the chunks, a statistic


def upgrade() -> None:
    with op.batch_alter_table("calibrators") as batch:
        batch.add_column(sa.Column("logged_rows", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("log_dropped_rows", sa.BigInteger(), nullable=False, server_default="0"))
    op.execute("UPDATE calibrators SET logged_rows = (SELECT COALESCE(SUM(n_rows), 0) FROM prediction_chunks "
               "WHERE prediction_chunks.calibrator_id = calibrators.id)")


def downgrade() -> None:
    with op.batch_alter_table("calibrators") as batch:
        batch.drop_column("log_dropped_rows")
        batch.drop_column("logged_rows")
