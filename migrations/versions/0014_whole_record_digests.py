"""Version digests cover every stored column: ``sha256-v2:`` of the canonical JSON of the whole
record (``app.registry.integrity``: name, number, method, input kind, k, n, class names, parameters,
summary, diagnostics, report, description, tags, tensor names, creation time) replaces
``sha256:`` of ``[params_json, class_names, tensor_names]``. No column changes.

The upgrade moves a row only when its old digest matches (a tampered row keeps it and stays
refused: a migration never launders one); the columns the old digest did not cover are recorded
as they are found. Rows signed with an integrity key (``hmac-sha256:``) keep their digest, which
still verifies; ``calibration-service sign-versions`` re-signs them over the whole record. The
downgrade moves intact ``sha256-v2:`` rows back; rows signed over the whole record cannot be
vouched for by the old digest without the key, and stay refused by the release before.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

import base64
import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime

import orjson
import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_COLUMNS = ("class_names", "summary", "diagnostics", "report", "tags", "tensor_names")
SELECT = sa.text(
    "SELECT v.id, v.checksum, c.name, v.version, v.method, v.input_kind, v.n_classes, v.n_samples, v.params_json, "
    "v.description, v.created_at, " + ", ".join(f"CAST(v.{column} AS TEXT) AS {column}" for column in JSON_COLUMNS)
    + " FROM calibrator_versions v JOIN calibrators c ON c.id = v.calibrator_id")
UPDATE = sa.text("UPDATE calibrator_versions SET checksum = :checksum WHERE id = :id")


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _record(row) -> dict | None:
    """The record the digest covers, or ``None`` when a column cannot be read."""
    try:
        values = {column: None if getattr(row, column) is None else json.loads(getattr(row, column))
                  for column in JSON_COLUMNS}
        moment = row.created_at if isinstance(row.created_at, datetime) else datetime.fromisoformat(row.created_at)
    except (TypeError, ValueError):
        return None
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    values.update(name=row.name, version=row.version, method=row.method, input_kind=row.input_kind,
                  n_classes=row.n_classes, n_samples=row.n_samples, params_json=row.params_json,
                  description=row.description, created_at=moment.isoformat(timespec="microseconds"))
    return values


def _whole(record: dict) -> str:
    message = orjson.dumps(record, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return "sha256-v2:" + _text(hashlib.sha256(message).digest())


def _first(record: dict) -> str:
    message = orjson.dumps([record["params_json"], record["class_names"], record["tensor_names"]],
                           option=orjson.OPT_SORT_KEYS)
    return "sha256:" + _text(hashlib.sha256(message).digest())


def _move(old_form, new_form) -> None:
    bind = op.get_bind()
    for row in bind.execute(SELECT).all():
        record = _record(row)
        if record is not None and row.checksum == old_form(record):
            bind.execute(UPDATE, {"checksum": new_form(record), "id": row.id})


def upgrade() -> None:
    _move(_first, _whole)


def downgrade() -> None:
    _move(_whole, _first)
