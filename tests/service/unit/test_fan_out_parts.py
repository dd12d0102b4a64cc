"""A fanned-out comparison (``app.jobs.fan_out``) whose part row is gone from the jobs table (purged
after the jobs' retention while the parent still waits on it) fails as "Part lost", naming the part,
instead of an internal error; the parent asks its other parts to stop."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import delete

from app.jobs import fan_out
from app.jobs import store as job_store
from app.jobs.rows import JobRow
from app.jobs.runner import JobProgress
from app.jobs.status import JobStatus
from app.platform.db import Database


def test_a_part_purged_while_the_parent_waits_fails_the_comparison_as_part_lost(migrated_sqlite_url):
    db = Database(migrated_sqlite_url)
    rng = np.random.default_rng(3)
    labels = np.arange(120) % 3
    x = rng.normal(size=(120, 3)) + 2.0 * np.eye(3)[labels]
    with db.write() as session:
        job_store.create_job(session, "parent", "compare", "demo", {}, None)
        assert job_store.claim(session, "parent", "this process")
    shared, units = fan_out.plan(x, ["temperature", "vector"], folds=2, seed=0, kind="logits", workers=2)
    assert len(units) == 2
    parent = fan_out.Parent(db, "parent", "demo", JobProgress(db, "parent"), "this process", stale_seconds=60)
    offered = []

    def offer(part_id: str) -> None:
        """The engine's hook: the first part is claimed by a (pretend) worker that then goes, and its
        row is purged; the second stays queued, so the parent runs it itself."""
        offered.append(part_id)
        if len(offered) == 1:
            with db.write() as session:
                session.execute(delete(JobRow).where(JobRow.id == part_id))

    with pytest.raises(fan_out.PartFailed) as failed:
        fan_out.compare_in_parts(parent, shared, units, x, labels, offer)
    assert failed.value.as_problem() == {"status": 500, "title": "Part lost",
                                         "detail": f"part {offered[0]} of the comparison is gone"}
    with db.read() as session:
        assert job_store.get_job(session, offered[1]).status == JobStatus.SUCCEEDED  # run here before the wait
