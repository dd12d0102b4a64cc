"""Version digests cover everything served: ``sha256:`` of the canonical JSON of
``[params_json, class_names, tensor_names]`` (``app.registry.integrity``; base64url, so the column keeps its
width) replaces the hex sha256 of the parameters alone. A row whose old checksum does not match
its parameters keeps it (and stays refused): a migration never launders a tampered row. Rows
signed with an integrity key cannot be vouched for by the old checksum: a downgrade leaves them
refused.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

import base64
import hashlib
from collections.abc import Sequence

import orjson
import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VERSIONS = sa.table("calibrator_versions", sa.column("id", sa.Integer), sa.column("params_json", sa.Text),
                    sa.column("class_names", sa.JSON), sa.column("tensor_names", sa.JSON),
                    sa.column("checksum", sa.String))


def _digest(row) -> str:
    message = orjson.dumps([row.params_json, row.class_names, row.tensor_names], option=orjson.OPT_SORT_KEYS)
    return "sha256:" + base64.urlsafe_b64encode(hashlib.sha256(message).digest()).decode().rstrip("=")


def _legacy(row) -> str:
    return hashlib.sha256(row.params_json.encode()).hexdigest()


def upgrade() -> None:
    bind = op.get_bind()
    for row in bind.execute(sa.select(VERSIONS)).all():
        if row.checksum == _legacy(row):
            bind.execute(VERSIONS.update().where(VERSIONS.c.id == row.id).values(checksum=_digest(row)))


def downgrade() -> None:
    bind = op.get_bind()
    for row in bind.execute(sa.select(VERSIONS)).all():
        if row.checksum == _digest(row):
            bind.execute(VERSIONS.update().where(VERSIONS.c.id == row.id).values(checksum=_legacy(row)))
        elif row.checksum.startswith("hmac-sha256:"):  # no legacy checksum can vouch for a signed row
            bind.execute(VERSIONS.update().where(VERSIONS.c.id == row.id).values(checksum="0" * 64))
