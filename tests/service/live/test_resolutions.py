"""References resolved once while the database is unchanged (``app.registry.cache.Resolutions``): what
another replica or process commits (an alias move, a new version, a deleted version) is served
from the very next call, and an unchanged database costs no lookup."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

from app.platform.db import Database, make_engine
from app.platform.errors import NotFound
from app.platform.migrate import upgrade
from app.registry import store
from app.registry.names import Reference
from app.registry.service import CalibrationService
from app.registry.serving import CalibrateSpec, FitSpec
from app.wire.batches import ArrayBatch
from tests.helpers import load_split

KIND, X, Y = load_split("cifar10_resnet50_cross_entropy", "val")
X, Y = X[:300], Y[:300]
REPO = Path(__file__).resolve().parents[2]


def replica(url: str) -> CalibrationService:
    """A service with its own database engine and connections, as another replica has."""
    return CalibrationService(Database(url), cache_size=8, max_body_bytes=1 << 24)


@pytest.fixture
def replicas(database_url):
    ours, theirs = replica(database_url), replica(database_url)
    ours.fit("demo", ArrayBatch(FitSpec(method="temperature"), KIND, X, Y))
    ours.fit("demo", ArrayBatch(FitSpec(method="temperature", options={"objective": "brier"}), KIND, X, Y))
    ours.set_alias("demo", "production", 1)
    yield ours, theirs
    ours.db.dispose()
    theirs.db.dispose()


def served_version(service: CalibrationService, reference: Reference) -> int:
    loaded = service.serving(reference)
    result = service.calibrate(loaded, ArrayBatch(CalibrateSpec(), KIND, X[:5], None))
    assert np.allclose(result.probabilities.sum(axis=1), 1.0)
    return result.version


def in_another_process(url: str, code: str) -> None:
    program = ("from app.platform.db import Database\n"
               "from app.registry.service import CalibrationService\n"
               f"service = CalibrationService(Database({url!r}), cache_size=8, max_body_bytes=1 << 24)\n" + code)
    subprocess.run([sys.executable, "-c", program], cwd=REPO, check=True, timeout=120)


def test_an_alias_moved_or_a_version_added_by_another_replica_is_served_at_the_next_call(replicas):
    ours, theirs = replicas
    alias, latest = Reference.parse("demo@production"), Reference("demo")
    assert (served_version(ours, alias), served_version(ours, latest)) == (1, 2)
    assert (served_version(ours, alias), served_version(ours, latest)) == (1, 2)  # now remembered
    theirs.set_alias("demo", "production", 2)
    assert served_version(ours, alias) == 2
    theirs.fit("demo", ArrayBatch(FitSpec(method="temperature"), KIND, X, Y))
    assert served_version(ours, latest) == 3
    theirs.delete_alias("demo", "production")
    with pytest.raises(NotFound, match="no alias 'production'"):
        ours.serving(alias)


def test_a_version_deleted_by_another_process_is_never_served(replicas, database_url):
    ours, _ = replicas
    pinned, latest = Reference.pinned("demo", 2), Reference("demo")
    assert (served_version(ours, pinned), served_version(ours, latest)) == (2, 2)
    in_another_process(database_url, "service.delete_version('demo', 2)\n"
                                     "service.set_alias('demo', 'production', 1)\n")
    with pytest.raises(NotFound, match="has no version 2"):
        ours.serving(pinned)
    assert served_version(ours, latest) == 1
    in_another_process(database_url, "service.delete_calibrator('demo')\n")
    with pytest.raises(NotFound, match="no calibrator named 'demo'"):
        ours.serving(latest)


def test_an_unchanged_database_is_not_asked_again(database_url, monkeypatch):
    service = replica(database_url)
    service.fit("demo", ArrayBatch(FitSpec(method="temperature"), KIND, X, Y))
    lookups = []
    resolve = store.resolve
    monkeypatch.setattr(store, "resolve", lambda db, reference: lookups.append(reference) or resolve(db, reference))
    for _ in range(5):
        assert served_version(service, Reference("demo")) == 1
    assert lookups == [Reference("demo")]
    service.set_alias("demo", "production", 1)  # a commit that changes a resolution: looked up again
    assert served_version(service, Reference("demo")) == 1
    assert len(lookups) == 2
    service.db.dispose()


def test_sqlite_files_and_migrated_postgres_databases_have_a_change_counter(sqlite_url, postgres_url):
    unmigrated, in_memory = Database(postgres_url), Database("sqlite://")
    assert unmigrated.data_version() is None and in_memory.data_version() is None  # no 0018 table; no file
    for url in (sqlite_url, postgres_url):
        upgrade(url)
        database = Database(url)
        first = database.data_version()
        assert isinstance(first, int) and database.data_version() == first
        database.dispose()
    assert isinstance(unmigrated.data_version(), int)  # asked again: migrated since
    unmigrated.dispose()
    in_memory.dispose()


def test_postgres_generation_moves_with_every_writer_in_its_own_transaction(migrated_postgres_url):
    """The triggers count any writer's commit (here plain SQL, not the service), only at its commit,
    and not the prediction log's counters in the calibrators' rows."""
    service = replica(migrated_postgres_url)
    service.fit("demo", ArrayBatch(FitSpec(method="temperature"), KIND, X, Y))
    service.fit("demo", ArrayBatch(FitSpec(method="temperature", options={"objective": "brier"}), KIND, X, Y))
    service.set_alias("demo", "production", 1)
    alias = Reference.parse("demo@production")
    assert served_version(service, alias) == 1
    writer = make_engine(migrated_postgres_url)
    with writer.connect() as connection:
        before = service.db.data_version()
        connection.execute(text("UPDATE calibrators SET logged_rows = logged_rows + 5"))
        connection.commit()
        assert service.db.data_version() == before  # not what a resolution reads
        connection.execute(text("UPDATE aliases SET version = 2 WHERE alias = 'production'"))
        assert service.db.data_version() == before and served_version(service, alias) == 1  # not committed
        connection.commit()
    assert service.db.data_version() > before
    assert served_version(service, alias) == 2
    writer.dispose()
    service.db.dispose()
