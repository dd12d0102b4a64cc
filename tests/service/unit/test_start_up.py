"""What a process start leaves out (docs/benchmarks.md, "Process start-up"): the embedded engine makes
its process pool, and with it multiprocessing's resource tracker, at its first job, not when the
application is built; ``calibration-service worker``'s supervisor reads the database's backend as
SQLAlchemy does without importing it; Alembic is imported without Mako's Pygments plugin, which other
importers still get."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.jobs.runner import EmbeddedEngine
from app.jobs.tasks import run_job
from app.platform.db import normalise_url
from app.worker import _backend
from tests.helpers import REPO


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_the_embedded_pool_is_made_by_the_first_job_and_refuses_jobs_once_shut_down(tmp_path):
    engine = EmbeddedEngine(run_job, f"sqlite:///{tmp_path / 'none.db'}", processes=1, heartbeat_seconds=1.0)
    assert engine.pool is None  # nothing started with the application
    engine.enqueue("no-such-job")  # the job process finds no such job and returns
    pool = engine.pool
    assert pool is not None
    engine.enqueue("no-such-job-either")
    assert engine.pool is pool  # one pool for every job
    deadline = time.monotonic() + 60
    while not pool._processes and time.monotonic() < deadline:  # spawned with the first job
        time.sleep(0.05)
    processes = list(pool._processes.values())
    assert processes
    engine.shutdown()
    assert engine.pool is None
    # gone (the pool's own thread reaps them, so ``join`` here could not tell)
    while any(Path(f"/proc/{process.pid}").exists() for process in processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{process.pid}").exists() for process in processes)
    with pytest.raises(RuntimeError):
        engine.enqueue("after-the-stop")
    assert engine.pool is None  # a stopped engine makes no new pool


@pytest.mark.parametrize("url", ["sqlite:///x.db", "sqlite://", "sqlite+pysqlite:///x.db", "postgresql://u@h/db",
                                 "postgres://u:p@h:5432/db", "postgresql+psycopg://u@h/db", "mysql+pymysql://h/db"])
def test_the_worker_reads_the_backend_as_sqlalchemy_does(url):
    assert _backend(url) == normalise_url(url).get_backend_name()


def test_a_url_the_worker_cannot_read_gets_sqlalchemy_s_error():
    with pytest.raises(Exception) as raised:
        normalise_url("not a url")
    with pytest.raises(type(raised.value)):
        _backend("not a url")


def test_alembic_is_imported_without_mako_s_pygments_plugin_which_later_imports_still_get():
    code = ("import sys, app.platform.migrate, mako.exceptions; "
            "assert 'pygments' not in sys.modules and mako.exceptions.pygments_html_formatter is None; "
            "assert 'mako.ext.pygmentplugin' not in sys.modules; "
            "import mako.ext.pygmentplugin; assert 'pygments' in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


@pytest.mark.postgres
def test_a_worker_on_a_database_not_migrated_says_to_migrate_and_exits_2(postgres_url):
    """A worker started before ``calibration-service migrate`` (compose orders them; a hand-run start
    may not) finds no job queue in the database: it says what to run instead of Procrastinate's bare
    ``ConnectorException`` traceback, and exits 2, as it does on SQLite."""
    env = {**os.environ, "DATABASE_URL": postgres_url, "CALIBRATION_JOB_ENGINE": "procrastinate"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "worker", "--concurrency", "1"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "calibration-service migrate" in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
