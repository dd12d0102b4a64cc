"""Work that runs on its own, off the request path: every ``CALIBRATION_SCHEDULE_SECONDS`` a
thread of each API process checks every calibrator's refit policy (``app.policies.run``), which
submits a refit job when its trigger fired (N new labels, a drift alarm, a schedule).

Several API processes (or replicas) may check at once: ``policies.run`` takes the calibrator's row
lock and records the run in the same transaction, so a trigger submits one job, not one per
process. A failing check is logged and tried again at the next tick; it never stops the thread.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select

from . import policies
from .errors import ServiceError
from .models import CalibratorRow
from .promotion_models import RefitPolicyRow

logger = logging.getLogger(__name__)


def policy_names(db) -> list[str]:
    """The calibrators that have a refit policy."""
    with db.read() as session:
        return list(session.scalars(select(CalibratorRow.name).join(
            RefitPolicyRow, RefitPolicyRow.calibrator_id == CalibratorRow.id).order_by(CalibratorRow.name)))


class Scheduler:
    def __init__(self, service, seconds: float):
        self.service = service
        self.seconds = seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> list[dict]:
        """Check every policy once; returns the jobs submitted."""
        submitted = []
        for name in policy_names(self.service.db):
            try:
                fired, answer = policies.run(self.service, name)
            except ServiceError as error:  # no observations yet, the queue full, the calibrator gone
                logger.info("refit policy of %s not run: %s", name, error.detail)
                continue
            if fired:
                logger.info("refit policy of %s submitted job %s", name, answer["id"])
                submitted.append(answer)
        return submitted

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            try:
                self.tick()
            except Exception as exc:  # the database away: the next tick tries again
                logger.warning("scheduled checks failed: %s", str(exc).splitlines()[0])

    def start(self) -> None:
        if self.seconds > 0:
            self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
