"""Every table of the service: each domain's rows module, imported here so that ``Base.metadata``
holds the whole schema that the Alembic migrations (``migrations/``) create and compare.

Rows live with their domain (``app/<domain>/rows.py``) over the shared ``Base`` of
``app.platform.rows``; this is the one module that imports them all."""

from __future__ import annotations

from .access import rows as access_rows
from .conformal import adaptive_rows as conformal_adaptive_rows
from .conformal import rows as conformal_rows
from .jobs import rows as jobs_rows
from .monitoring import rows as monitoring_rows
from .observations import rows as observations_rows
from .platform.rows import Base
from .prediction_log import rows as prediction_log_rows
from .promotion import rows as promotion_rows
from .registry import rows as registry_rows

__all__ = ["Base", "access_rows", "conformal_adaptive_rows", "conformal_rows", "jobs_rows", "monitoring_rows",
           "observations_rows", "prediction_log_rows", "promotion_rows",
           "registry_rows"]
