"""Work that runs on its own, off the request path: every ``CALIBRATION_SCHEDULE_SECONDS`` a
thread of each API process
- submits an ``alarms`` job (``app.monitoring.alarms.evaluate``: the drift monitors brought up to date)
  for each calibrator whose observations or prediction log grew since the thread last looked, and
  again, on the same rows, when the job it submitted ended without success (failed, cancelled, its
  worker lost): after 1, 2, 4, ... up to ``2**RETRY_DOUBLINGS`` ticks while such jobs keep ending so,
  so that the monitors are not left behind the stored rows until more rows come, and
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
from dataclasses import dataclass

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

#: the longest wait between tries of an alarms job on the same rows: 2**6 ticks (an hour at 60 s)
RETRY_DOUBLINGS = 6


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


@dataclass
class Evaluation:
    """The last ``alarms`` job submitted for a calibrator and the data marks it was submitted at;
    ``job_id`` is None once a job on these marks succeeded."""

    marks: tuple[int, int]
    job_id: str | None
    failures: int = 0  # jobs on these marks that ended without success
    ended: bool = False  # the last one did (counted in failures)
    retry_tick: int = 0  # the tick from which it is submitted again


class Scheduler:
    def __init__(self, service: Serving, seconds: float, webhook_policy: webhooks.WebhookPolicy | None = None):
        self.service = service
        self.seconds = seconds
        self.webhook_policy = webhook_policy or webhooks.WebhookPolicy.of(get_settings())
        self.seen: dict[str, Evaluation] = {}
        self.ticks = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> list[dict]:
        """Look once: alarm evaluations where data arrived, then every policy, then the webhook
        deliveries due; returns the jobs submitted."""
        submitted = []
        jobs = self.service.jobs
        if jobs is None:  # an application's service has jobs (app.wiring); a job process's, no scheduler
            raise RuntimeError("the scheduler submits jobs: it needs a service that runs them")
        if self.service.prediction_log is not None:  # this process's served rows, not only the flushed ones
            self.service.prediction_log.flush()
        self.ticks += 1
        for name, marks in data_marks(self.service.db).items():
            if not self._evaluation_due(jobs, name, marks):
                continue
            try:
                answer = jobs.submit("alarms", name, {}, None)
            except ServiceError as error:  # the queue full: the next tick tries again
                logger.info("drift monitors of %s not evaluated: %s", name, error.detail)
                continue
            submitted.append(answer)
            last = self.seen.get(name)
            failures = last.failures if last is not None and last.marks == marks else 0
            self.seen[name] = Evaluation(marks, answer["id"], failures)
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

    def _evaluation_due(self, jobs, name: str, marks: tuple[int, int]) -> bool:
        """New rows since the last alarms job; or the last one, on these rows, ended without success
        and its wait (``2**(failures - 1) - 1`` ticks, at most ``2**RETRY_DOUBLINGS``) is over."""
        last = self.seen.get(name)
        if last is None or last.marks != marks:
            return True
        if last.job_id is None:
            return False
        if not last.ended:
            try:
                status = jobs.get(last.job_id)["status"]
            except ServiceError:  # purged after its retention: long ended, its outcome unknown
                status = "gone"
            if status == "succeeded":
                last.job_id = None
                return False
            if status in ("queued", "running"):  # the job API's states (app.jobs.status)
                return False
            last.ended, last.failures = True, last.failures + 1
            last.retry_tick = self.ticks + 2 ** min(last.failures - 1, RETRY_DOUBLINGS) - 1
            logger.warning("drift monitors of %s: alarms job %s ended %s; tried again after %d more tick(s)",
                           name, last.job_id, status, last.retry_tick - self.ticks)
        return self.ticks >= last.retry_tick

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
