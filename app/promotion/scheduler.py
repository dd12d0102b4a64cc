"""Work that runs on its own, off the request path: every ``CALIBRATION_SCHEDULE_SECONDS`` a
thread of each API process
- submits an ``alarms`` job (``app.monitoring.alarms.evaluate``: the drift monitors brought up to date)
  for each calibrator whose observations or prediction log grew since the thread last looked, and
- checks every calibrator's refit policy (``app.promotion.policies.run``), which submits a refit job when its
  trigger fired (N new labels, a drift alarm, a schedule), and
- makes the due attempts of the webhook deliveries of new alarms (``app.monitoring.webhooks.deliver_due``),
  each bounded by its deadline, after the checks so that a slow receiver delays no policy.

Several API processes (or replicas) may check at once: ``policies.run`` takes the calibrator's row
lock and records the run in the same transaction, so a trigger submits one job, not one per
process; two ``alarms`` jobs for the same rows are harmless (a monitor is saved only if no other
evaluation moved it meanwhile), merely redundant; a webhook attempt is claimed in the database
before it is made, so one process makes it. A failing check is logged and tried again at the
next tick; it never stops the thread.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select

from ..monitoring import webhooks
from ..observations import reads as observations
from ..platform.errors import ServiceError
from ..platform.logs import first_line
from ..prediction_log import reads as prediction_log
from ..registry import reads as registry
from ..registry.serving import Serving
from ..settings import get_settings
from . import policies
from .rows import RefitPolicyRow

logger = logging.getLogger(__name__)


def policy_names(db) -> list[str]:
    """The calibrators that have a refit policy."""
    with db.read() as session:
        names = registry.calibrator_names(session)  # in the database's order of names
        with_policy = set(session.scalars(select(RefitPolicyRow.calibrator_id)))
        return [name for calibrator_id, name in names.items() if calibrator_id in with_policy]


def data_marks(db) -> dict[str, tuple[int, int]]:
    """Per calibrator with data, the newest observation chunk id and prediction chunk id."""
    marks: dict[str, list[int]] = {}
    with db.read() as session:
        names = registry.calibrator_names(session)
        for newest_ids, slot in ((observations.newest_chunk_ids(session), 0),
                                 (prediction_log.newest_chunk_ids(session), 1)):
            for calibrator_id, newest in newest_ids.items():
                if calibrator_id in names:
                    marks.setdefault(names[calibrator_id], [0, 0])[slot] = newest
    return {name: (a, b) for name, (a, b) in marks.items()}


class Scheduler:
    def __init__(self, service: Serving, seconds: float, webhook_policy: webhooks.WebhookPolicy | None = None):
        self.service = service
        self.seconds = seconds
        self.webhook_policy = webhook_policy or webhooks.WebhookPolicy.of(get_settings())
        self.seen: dict[str, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> list[dict]:
        """Look once: alarm evaluations where data arrived, then every policy, then the webhook
        deliveries due; returns the jobs submitted."""
        submitted = []
        if self.service.prediction_log is not None:  # this process's served rows, not only the flushed ones
            self.service.prediction_log.flush()
        for name, mark in data_marks(self.service.db).items():
            if self.seen.get(name) != mark:
                try:
                    submitted.append(self.service.jobs.submit("alarms", name, {}, None))
                except ServiceError as error:  # the queue full: the next tick tries again
                    logger.info("drift monitors of %s not evaluated: %s", name, error.detail)
                    continue
                self.seen[name] = mark
        for name in policy_names(self.service.db):
            try:
                fired, answer = policies.run(self.service, name)
            except ServiceError as error:  # no observations yet, the queue full, the calibrator gone
                logger.info("refit policy of %s not run: %s", name, error.detail)
                continue
            if fired:
                logger.info("refit policy of %s submitted job %s", name, answer["id"])
                submitted.append(answer)
        webhooks.deliver_due(self.service.db, self.webhook_policy)
        return submitted

    def _run(self) -> None:
        while not self._stop.wait(self.seconds):
            try:
                self.tick()
            except Exception as exc:  # the database away: the next tick tries again
                logger.warning("scheduled checks failed: %s", first_line(exc))

    def start(self) -> None:
        if self.seconds > 0:
            self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
