"""Epochs of the prediction log's id index (migration 0011): a writer fills one open epoch per
calibrator and closes it with a Bloom filter of its ids; labels are looked up in the open epochs and
the closed ones whose filter may hold the id, and an id logged in several epochs joins its first
serving. On SQLite and Postgres, through the real writer (``PredictionLog``'s buffer)."""

from __future__ import annotations

import threading
import tracemalloc
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event, insert, select, text, update

from app.platform.db import Database, make_engine
from app.platform.migrate import downgrade, upgrade
from app.platform.rows import utcnow
from app.prediction_log import bloom
from app.prediction_log import epoch_store as prediction_epoch_store
from app.prediction_log import store as prediction_log_store
from app.prediction_log.epochs import EpochFilters, EpochWriter
from app.prediction_log.lookup import claim_labels, find_logged
from app.prediction_log.rows import PredictionChunkRow, PredictionEpochRow
from app.prediction_log.service import PredictionLog
from app.prediction_log.store import delete_predictions_before, log_predictions, logged_counts, prediction_chunks
from app.registry.rows import CalibratorRow
from app.registry.store import ResolvedVersion

KEYS = st.lists(st.text(min_size=1, max_size=40).filter(lambda s: "," not in s), min_size=0, max_size=300,
                unique=True)


@given(KEYS, st.integers(1, 16), st.integers(1, 12))
@settings(max_examples=60, deadline=None)
def test_a_bloom_filter_never_misses_a_key_it_holds(keys, bits_per_key, hashes):
    data = bloom.build(keys, bits_per_key, hashes)
    bits = len(data) * 8
    assert bits == bloom.size_bits(len(keys), bits_per_key) and bits & (bits - 1) == 0
    assert max(64, len(keys) * bits_per_key) <= bits < max(128, 2 * len(keys) * bits_per_key)
    if keys:
        assert bloom.Probe(keys).maybe_held(data, hashes).all()


def test_a_bloom_filters_false_positives_are_near_the_theory():
    """50000 keys at 10 bits (2^19 bits: 10.5 a key) and 7 hashes: (1 - e^(-7 n / m))^7 = 0.70% of
    other keys pass. Over 200000 others the count is binomial (sd ~ 37 of ~1400): within 6 sd."""
    keys = [f"member-{i}" for i in range(50_000)]
    data = bloom.build(keys)
    others = [f"other-{i}" for i in range(200_000)]
    rate = (1 - np.exp(-bloom.HASHES * len(keys) / (len(data) * 8))) ** bloom.HASHES
    assert 0.006 < rate < 0.0082
    passed = int(bloom.Probe(others).maybe_held(data, bloom.HASHES).sum())
    assert abs(passed - rate * len(others)) <= 6 * (len(others) * rate * (1 - rate)) ** 0.5


def test_bad_filter_parameters_are_value_errors():
    with pytest.raises(ValueError, match="bits_per_key"):
        bloom.build(["a"], 0)
    with pytest.raises(ValueError, match="not a Bloom filter"):
        bloom.Probe(["a"]).maybe_held(b"", 7)
    with pytest.raises(ValueError, match="max_ids"):
        EpochWriter(0)


def test_an_id_served_again_through_another_writer_joins_its_first_serving(db):
    """Writer A opened its epoch before writer B; ``x`` is served by B first, then by A: the label
    joins B's row (the chunk written first), and a second label finds it labelled."""
    first, second = PredictionLog(db), PredictionLog(db)
    _serve(first, [["a"]])
    assert _serve(second, [["x"]]) == {"x": 0.0}
    with db.write() as session:
        assert claim_labels(session, 1, find_logged(session, 1, ["x"])) == {"x"}
    _serve(first, [["b"], ["x"]])  # "x" again, with value 1, in A's (older) epoch
    assert _joined(db, ["a", "b", "x"]) == {"a": 0.0, "b": 0.0, "x": 0.0}
    with db.write() as session:
        found = find_logged(session, 1, ["x"])
        assert found["x"].labelled and claim_labels(session, 1, found) == set()


def test_an_epoch_opened_by_a_transaction_that_rolled_back_is_forgotten(db):
    """On SQLite a rolled-back epoch's id is handed out again (here to calibrator 2's writer): the
    writer must not take it for its own."""
    writer, other = EpochWriter(), EpochWriter()
    with pytest.raises(RuntimeError), db.write() as session:
        writer.epoch_for(session, 1)
        raise RuntimeError("the flush failed")
    writer.rolled_back(1)
    with db.write() as session:
        theirs = other.epoch_for(session, 2)
    other.committed(2, 1)
    with db.write() as session:
        mine = writer.epoch_for(session, 1)
    writer.committed(1, 1)
    assert mine != theirs
    with db.read() as session:
        assert dict(session.execute(select(PredictionEpochRow.id, PredictionEpochRow.calibrator_id)).all()) == {
            theirs: 2, mine: 1}


@pytest.fixture
def db(database_url):
    db = Database(database_url)
    with db.write() as session:
        session.execute(insert(CalibratorRow), [{"name": "epochs"}, {"name": "other"}])
    yield db
    db.dispose()


def _serve(log: PredictionLog, batches: list[list[str]], calibrator_id: int = 1) -> dict[str, float]:
    """Serve each batch of client ids (row value: its serving's number) and flush after each; the
    first value each id was served with."""
    first: dict[str, float] = {}
    for number, ids in enumerate(batches):
        resolved = ResolvedVersion("epochs", 1, "", 1, calibrator_id=calibrator_id, log_rate=1.0)
        log.record(resolved, "logits", 2, np.full((len(ids), 2), float(number)), ids)
        log.flush()
        for pid in ids:
            first.setdefault(pid, float(number))
    return first


def _joined(db: Database, ids: list[str], filters: EpochFilters | None = None, calibrator_id: int = 1) -> dict:
    """The value of the row each of ``ids`` joins."""
    with db.read() as session:
        found = find_logged(session, calibrator_id, ids, filters)
        chunks = prediction_chunks(session, {logged.chunk_id for logged in found.values()})
    return {pid: float(chunks[logged.chunk_id][3][logged.row][0]) for pid, logged in found.items()}


def _epochs(db: Database) -> list[tuple]:
    with db.read() as session:
        return [tuple(r) for r in session.execute(select(PredictionEpochRow.calibrator_id, PredictionEpochRow.n_ids,
                                                         PredictionEpochRow.bloom_hashes).order_by("id"))]


@given(st.lists(st.lists(st.sampled_from([f"id-{i}" for i in range(40)]), min_size=1, max_size=6, unique=True),
                min_size=1, max_size=12))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_ids_in_many_small_epochs_join_their_first_serving_whatever_the_filters_say(sqlite_url, batches):
    """Epochs of 4 ids: repeats across epochs join the first serving, with the real filters, with
    filters that say "maybe" to every id (only slower) and through a cache kept across calls."""
    upgrade(sqlite_url)
    db = Database(sqlite_url)
    try:
        with db.write() as session:
            session.execute(text("DELETE FROM calibrators"))
            calibrator_id = session.execute(insert(CalibratorRow).returning(CalibratorRow.id),
                                            {"name": "epochs"}).scalar_one()
        log = PredictionLog(db, epochs=EpochWriter(max_ids=4))
        first = _serve(log, batches, calibrator_id)
        everything = [*first, "never-served"]
        cache = EpochFilters()
        assert _joined(db, everything, calibrator_id=calibrator_id) == first
        assert _joined(db, everything, cache, calibrator_id) == first == _joined(db, everything, cache, calibrator_id)
        with db.write() as session:
            session.execute(update(PredictionEpochRow).where(PredictionEpochRow.bloom_hashes.is_not(None))
                            .values(bloom=b"\xff" * 8))
        assert _joined(db, everything, calibrator_id=calibrator_id) == first
    finally:
        db.dispose()


def test_a_writer_closes_full_epochs_with_filters_and_labels_join_across_them(db):
    log = PredictionLog(db, epochs=EpochWriter(max_ids=5))
    batches = [[f"u{i}-{j}" for j in range(3)] for i in range(6)] + [["u0-0", "u5-2", "fresh"]]
    first = _serve(log, batches)
    # 3 ids a flush, closed once 5 are in: epochs of 6, 6, 6 and an open one (3: counted when closed)
    assert _epochs(db) == [(1, 6, 7), (1, 6, 7), (1, 6, 7), (1, 0, None)]
    assert _joined(db, [*first, "nope"]) == first
    with db.write() as session:
        found = find_logged(session, 1, ["u0-0", "u5-2", "fresh"])
        assert claim_labels(session, 1, found) == {"u0-0", "u5-2", "fresh"}
    with db.write() as session:
        found = find_logged(session, 1, ["u0-0", "u5-2", "fresh"])
        assert [found[p].labelled for p in ("u0-0", "u5-2", "fresh")] == [True, True, True]
        assert claim_labels(session, 1, found) == set()
        # rows, not ids: the two repeats are served twice each, and a label marks both servings
        assert logged_counts(session, 1) == (21, 5)
    # a filter that holds nothing hides its epoch's ids: the lookups do read the filters
    with db.write() as session:
        session.execute(update(PredictionEpochRow).where(PredictionEpochRow.id == 1).values(bloom=b"\0" * 8))
    assert set(_joined(db, list(first))) == set(first) - {f"u{i}-{j}" for i in (0, 1) for j in range(3)} | {"u0-0"}


class _Statements:
    """The SQL statements the database's engine runs (a listener on the real engine)."""

    def __init__(self, db: Database):
        self.seen: list[str] = []
        self.engine = db.engine
        event.listen(self.engine, "before_cursor_execute", self._record)

    def _record(self, conn, cursor, statement, parameters, context, executemany):
        self.seen.append(statement)

    def read_back(self) -> int:
        """Statements that read an epoch's ids back to build its filter (not only its labels' rows)."""
        return sum("SELECT prediction_id FROM logged_predictions" in statement and "n_rows = 0" not in statement
                   for statement in self.seen)


def _stored_filters(db: Database) -> list[tuple[int, int, bytes]]:
    """(n_ids, hashes, filter) of each closed epoch, and the filter of the ids its index holds."""
    with db.read() as session:
        rows = session.execute(select(PredictionEpochRow.id, PredictionEpochRow.calibrator_id, PredictionEpochRow.n_ids,
                                      PredictionEpochRow.bloom).where(PredictionEpochRow.bloom_hashes.is_not(None))
                               .order_by(PredictionEpochRow.id)).all()
        held = {epoch_id: list(session.scalars(text(
            "SELECT prediction_id FROM logged_predictions WHERE calibrator_id = :c AND epoch_id = :e"),
            {"c": calibrator_id, "e": epoch_id})) for epoch_id, calibrator_id, _, _ in rows}
    return [(n_ids, len(held[epoch_id]), data, bloom.build(held[epoch_id])) for epoch_id, _, n_ids, data in rows]


def test_a_writer_closes_its_epochs_with_the_filter_of_what_it_wrote_without_reading_the_ids_back(db):
    """Client ids, a repeat within the epoch and batches of generated ids, over two calibrators:
    each filter the writer stores is byte for byte the filter of the ids its epoch holds, sized by
    their count, and no close read them back."""
    statements = _Statements(db)
    log = PredictionLog(db, epochs=EpochWriter(max_ids=6))
    _serve(log, [["a", "b", "c"], ["d", "a", "e"], ["f"], ["g", "h"], ["a", "i", "j", "k", "l", "m", "n"]])
    _serve(log, [["x", "y"]], calibrator_id=2)
    resolved = ResolvedVersion("epochs", 1, "", 1, calibrator_id=1, log_rate=1.0)
    for _ in range(3):
        log.record(resolved, "logits", 2, np.zeros((5, 2)), None)  # generated ids: a batch row each
    log.flush()
    log.stop()
    assert statements.read_back() == 0
    stored = _stored_filters(db)
    # closed once 6 are in: a-f (the repeat of a is its row), g, h, a and i-n; then calibrator 2's x, y
    # and the three batches, closed by the stop
    assert [n_ids for n_ids, *_ in stored] == [6, 9, 2, 3]
    assert all(n_ids == held and data == built for n_ids, held, data, built in stored)
    assert _joined(db, list("abcdefghijklmn")) == {**dict.fromkeys("abc", 0.0), "d": 1.0, "e": 1.0, "f": 2.0,
                                                    "g": 3.0, "h": 3.0, **dict.fromkeys("ijklmn", 4.0)}


def test_a_writer_reads_the_ids_back_where_it_may_not_know_them_all(db):
    """An epoch that a failed transaction wrote into (its commit may have landed), one that a
    transaction wrote into without ``wrote``, and one holding more ids than the writer keeps
    digests of: each close reads its ids back, and every filter holds every id."""
    statements = _Statements(db)
    writer = EpochWriter(max_ids=1000, kept_digests=4)
    with db.write() as session:  # an open epoch of calibrator 1
        epoch = writer.epoch_for(session, 1)
        log_predictions(session, 1, 1, "logits", 2, np.zeros((1, 2)), ["a"], epoch_id=epoch)
        writer.wrote(1, ["a"])
    writer.committed(1, 1)
    with db.write() as session:  # written, then the transaction fails: here its rows go
        assert writer.epoch_for(session, 1) == epoch
        log_predictions(session, 1, 1, "logits", 2, np.zeros((1, 2)), ["b"], epoch_id=epoch)
        writer.wrote(1, ["b"])
        session.rollback()
    writer.rolled_back(1)
    with db.write() as session:  # calibrator 2: written without ``wrote``
        epoch_2 = writer.epoch_for(session, 2)
        log_predictions(session, 2, 1, "logits", 2, np.zeros((1, 2)), ["z"], epoch_id=epoch_2)
    writer.committed(2, 1)
    assert writer.close_all(db) == 2
    assert statements.read_back() == 2
    log = PredictionLog(db, epochs=EpochWriter(max_ids=1000, kept_digests=4))
    _serve(log, [["c", "d", "e"], ["f", "g"]])  # five ids: more than the four it keeps digests of
    log.stop()
    assert statements.read_back() == 3
    stored = _stored_filters(db)
    assert [n_ids for n_ids, *_ in stored] == [1, 1, 5]
    assert all(n_ids == held and data == built for n_ids, held, data, built in stored)
    assert set(_joined(db, list("abcdefg"))) == set("acdefg")


def test_a_generated_ids_label_in_the_open_epoch_is_in_the_filter_its_writer_closes_it_with(db):
    """A label of a generated id inserts the id's own row (``n_rows`` 0) into its batch's epoch, here
    the writer's open one, which never saw the id: the close reads those rows and its filter is the
    filter of the ids the epoch holds; the id is then found labelled through its own row."""
    statements = _Statements(db)
    log = PredictionLog(db, epochs=EpochWriter(max_ids=1000))
    served = log.record(ResolvedVersion("epochs", 1, "", 1, calibrator_id=1, log_rate=1.0), "logits", 2,
                        np.zeros((3, 2)), None)
    log.flush()
    generated = served.prefix + "1"
    with db.write() as session:
        assert claim_labels(session, 1, find_logged(session, 1, [generated])) == {generated}
    log.stop()
    assert statements.read_back() == 0
    (stored,) = _stored_filters(db)
    assert stored[0] == stored[1] == 2 and stored[2] == stored[3]
    with db.read() as session:
        found = find_logged(session, 1, [generated])[generated]
    assert found.own and found.labelled


def test_an_epoch_that_retention_thinned_while_open_gets_the_filter_of_what_it_holds(db):
    """A quiet calibrator's epoch stays open past the log's retention: retention deletes its old
    chunks' rows, and the writer's digests of them no longer match what the epoch holds. Its close
    reads the ids back: a filter sized for and holding the 10 ids left, not saturated by 1000."""
    statements = _Statements(db)
    log = PredictionLog(db, epochs=EpochWriter(max_ids=100_000))
    resolved = ResolvedVersion("epochs", 1, "", 1, calibrator_id=1, log_rate=1.0)
    for i in range(10):
        log.record(resolved, "logits", 2, np.zeros((100, 2)), [f"old-{i}-{j}" for j in range(100)])
        log.flush()
    with db.write() as session:
        session.execute(update(PredictionChunkRow).values(created_at=utcnow() - timedelta(days=40)))
    log.record(resolved, "logits", 2, np.zeros((10, 2)), [f"new-{j}" for j in range(10)])
    log.flush()
    with db.write() as session:
        delete_predictions_before(session, utcnow() - timedelta(days=30))
    log.stop()
    assert statements.read_back() == 1
    (stored,) = _stored_filters(db)
    assert stored[0] == stored[1] == 10 and stored[2] == stored[3]
    others = [f"never-{i}" for i in range(10_000)]
    assert bloom.Probe(others).maybe_held(stored[2], bloom.HASHES).mean() < 0.05


def test_kept_digests_cost_16_bytes_an_id_and_a_budget_over_all_epochs(db):
    """An epoch filled one id a transaction (a quiet calibrator) keeps 16 bytes an id, not an array
    pair a transaction; past ``kept_digests`` over all of a writer's epochs, the epoch that would
    pass it falls back to reading its ids back, the others keep theirs."""
    writer = EpochWriter(kept_digests=8192)
    with db.write() as session:
        writer.epoch_for(session, 1)
    tracemalloc.start()
    try:
        for i in range(4096):
            writer.wrote(1, [f"id-{i}"])
            writer.committed(1, 1)
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert used / 4096 <= 24, f"{used / 4096:.0f} bytes an id kept"
    statements = _Statements(db)
    for calibrator_id, n in ((1, 3), (2, 3)):
        with db.write() as session:
            epoch_id = writer.epoch_for(session, calibrator_id)
            keys = [f"c{calibrator_id}-{i}" for i in range(n if calibrator_id == 2 else 4096 + n)]
            log_predictions(session, calibrator_id, 1, "logits", 2, np.zeros((len(keys), 2)), keys, epoch_id=epoch_id)
            writer.wrote(calibrator_id, keys)
        writer.committed(calibrator_id, len(keys))
    assert writer.close_all(db) == 2
    assert statements.read_back() == 1  # calibrator 1's 4096 + 4099 pass the budget: its epoch reads back
    assert all(n_ids == held and data == built for n_ids, held, data, built in _stored_filters(db))


@given(st.lists(st.one_of(st.none(), st.sampled_from([*"abcdefgh", "a b", "A", "é", "10", "9"])), min_size=1,
                max_size=40), st.integers(1, 7))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_whatever_the_ids_order_repeats_and_statements_each_id_keeps_its_first_row(db, monkeypatch, ids, per_statement):
    """The writer's statement (SQLite: sorted, ``ON CONFLICT``; Postgres: ``DISTINCT ON`` and ``NOT
    EXISTS``) over ids with repeats, ``None`` and any statement size: each id keeps the row of its
    first occurrence, and the count it returns is of the ids stored."""
    monkeypatch.setattr(prediction_log_store, "IDS_PER_STATEMENT", per_statement)
    with db.write() as session:
        epoch_id = prediction_epoch_store.open_epoch(session, 1)
        n = log_predictions(session, 1, 1, "logits", 2, np.zeros((len(ids), 2)), ids, epoch_id=epoch_id)
        rows = dict(session.execute(text("SELECT prediction_id, row FROM logged_predictions WHERE epoch_id = :e"),
                                    {"e": epoch_id}).all())
    first: dict[str, int] = {}
    for row, pid in enumerate(ids):
        if pid is not None:
            first.setdefault(pid, row)
    assert rows == first and n == len(first)


def test_an_epoch_closed_under_its_writer_is_not_written_again(db):
    """Retention closed the writer's open epoch (its writer looked stopped): the next flush opens
    a new one instead of adding ids the filter would not hold."""
    writer = EpochWriter(max_ids=1000)
    log = PredictionLog(db, epochs=writer)
    _serve(log, [["a", "b"]])
    with db.write() as session:
        (stale,) = prediction_epoch_store.stale(session, utcnow() + timedelta(seconds=1))
        assert prediction_epoch_store.close(session, stale)
    _serve(log, [["c"]])
    assert _epochs(db) == [(1, 2, 7), (1, 0, None)]
    assert set(_joined(db, ["a", "b", "c"])) == {"a", "b", "c"}


def test_stopping_closes_the_open_epochs_and_retention_closes_stale_ones_and_deletes_empty_ones(db):
    log = PredictionLog(db, epochs=EpochWriter(max_ids=1000), log_retention_days=1.0)
    _serve(log, [["a"]])
    _serve(log, [["z"]], calibrator_id=2)
    log.stop()
    assert _epochs(db) == [(1, 1, 7), (2, 1, 7)]
    with db.write() as session:  # an epoch a writer left open, last written three hours ago
        epoch_id = prediction_epoch_store.open_epoch(session, 1)
        log_predictions(session, 1, 1, "logits", 2, np.zeros((1, 2)), ["b"], epoch_id=epoch_id)
        session.execute(update(PredictionEpochRow).where(PredictionEpochRow.id == epoch_id)
                        .values(written_at=utcnow() - timedelta(hours=3)))
        # calibrator 2's chunk is old enough for retention
        session.execute(text("UPDATE prediction_chunks SET created_at = :t WHERE calibrator_id = 2"),
                        {"t": utcnow() - timedelta(days=2)})
    log.apply_retention()
    assert _epochs(db) == [(1, 1, 7), (1, 1, 7)]
    assert set(_joined(db, ["a", "b"])) == {"a", "b"}
    assert _joined(db, ["z"], calibrator_id=2) == {}


@pytest.mark.postgres
def test_a_close_waits_for_the_write_in_progress_and_holds_its_ids(migrated_postgres_url):
    """On Postgres a writer's transaction holds its epoch's row lock (``mark_written``): a close
    started meanwhile waits for it and its filter holds the ids that transaction wrote."""
    db = Database(migrated_postgres_url)
    try:
        with db.write() as session:
            session.execute(insert(CalibratorRow), [{"name": "locked"}])
            epoch_id = prediction_epoch_store.open_epoch(session, 1)
        closed = threading.Event()
        with db.write() as session:
            assert prediction_epoch_store.mark_written(session, epoch_id, 1)
            log_predictions(session, 1, 1, "logits", 2, np.zeros((1, 2)), ["late"], epoch_id=epoch_id)

            def close():
                with db.write() as other:
                    prediction_epoch_store.close(other, epoch_id)
                closed.set()
            closer = threading.Thread(target=close)
            closer.start()
            assert not closed.wait(1.0)  # blocked on the row lock
        closer.join(30)
        assert closed.is_set()
        with db.write() as session:
            (data, hashes), = prediction_epoch_store.filters(session, [epoch_id]).values()
            assert bloom.Probe(["late"]).maybe_held(data, hashes).all()
            assert not prediction_epoch_store.mark_written(session, epoch_id, 1)
    finally:
        db.dispose()


@pytest.mark.postgres
def test_an_id_whose_first_chunk_commits_after_its_label_is_not_labelled_again(migrated_postgres_url):
    """On Postgres a chunk's id is taken at insert: writer A takes the lower one for ``x`` but
    commits after writer B. A label between the two commits claims B's row; once A's row is
    visible, ``x`` joins it (the first chunk) and reads labelled: a second label claims nothing."""
    db = Database(migrated_postgres_url)
    try:
        with db.write() as session:
            session.execute(insert(CalibratorRow), [{"name": "race"}])
        with db.write() as late:
            log_predictions(late, 1, 1, "logits", 2, np.full((1, 2), 1.0), ["x"])
            with db.write() as early:
                log_predictions(early, 1, 1, "logits", 2, np.full((1, 2), 2.0), ["x"])
            assert _joined(db, ["x"]) == {"x": 2.0}
            with db.write() as session:
                assert claim_labels(session, 1, find_logged(session, 1, ["x"])) == {"x"}
        assert _joined(db, ["x"]) == {"x": 1.0}
        with db.write() as session:
            found = find_logged(session, 1, ["x"])
            assert found["x"].labelled and len(found["x"].epochs) == 2
            assert claim_labels(session, 1, found) == set()
    finally:
        db.dispose()


def test_a_label_marks_every_row_of_an_id_so_retention_of_the_first_leaves_it_labelled(db):
    log = PredictionLog(db, epochs=EpochWriter(max_ids=1), log_retention_days=1.0)
    _serve(log, [["x"], ["x"]])  # two epochs, one row of "x" in each
    with db.write() as session:
        assert claim_labels(session, 1, find_logged(session, 1, ["x"])) == {"x"}
        session.execute(text("UPDATE prediction_chunks SET created_at = :t WHERE id = 1"),
                        {"t": utcnow() - timedelta(days=2)})
    log.apply_retention()
    assert _joined(db, ["x"]) == {"x": 1.0}
    with db.write() as session:
        found = find_logged(session, 1, ["x"])
        assert found["x"].labelled and claim_labels(session, 1, found) == set()


def test_the_migration_puts_old_ids_in_epochs_and_the_downgrade_keeps_each_ids_first_row(empty_url):
    """Two ids, then 65536 more in a later chunk: epochs of 65536 in chunk order, left open for
    retention to close one by one; "x" served again after the upgrade still joins its first row."""
    upgrade(empty_url, "0010")
    engine = make_engine(empty_url)
    many = [f"old-{i:05d}" for i in range(65536)]
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO calibrators (id, name, last_version, created_at, log_sample_rate) "
                                "VALUES (1, 'old', 1, '2026-11-01 00:00:00', 1.0)"))
        chunk, bulk = (connection.execute(text(
            "INSERT INTO prediction_chunks (calibrator_id, version, input_kind, n_rows, n_classes, dtype, "
            "inputs, created_at) VALUES (1, 1, 'logits', :n, 2, '<f8', :data, '2026-11-01 00:00:00') RETURNING id"),
            {"n": n, "data": np.arange(2 * n, dtype="<f8").tobytes()}).scalar_one() for n in (2, len(many)))
        connection.execute(text("INSERT INTO logged_predictions (calibrator_id, prediction_id, chunk_id, row, "
                                "labelled, n_rows) VALUES (1, 'x', :c, 0, false, 1), (1, 'y', :c, 1, true, 1)"),
                           {"c": chunk})
        connection.execute(text("INSERT INTO logged_predictions (calibrator_id, prediction_id, chunk_id, row, "
                                "labelled, n_rows) VALUES (1, :p, :c, :r, false, 1)"),
                           [{"p": pid, "c": bulk, "r": i} for i, pid in enumerate(many)])
    engine.dispose()
    upgrade(empty_url)
    db = Database(empty_url)
    try:
        assert _epochs(db) == [(1, 0, None), (1, 0, None)]
        assert _joined(db, ["x", "y", many[-3], many[-1]]) == {"x": 0.0, "y": 2.0, many[-3]: 2 * 65533.0,
                                                                many[-1]: 2 * 65535.0}
        log = PredictionLog(db, epochs=EpochWriter(max_ids=1))
        _serve(log, [["x", "new"]])  # "x" again: a second row, in a new epoch
        log.apply_retention()  # closes the migrated epochs: last written on 2026-11-01
        assert _epochs(db) == [(1, 65536, 7), (1, 2, 7), (1, 2, 7)]
        assert _joined(db, ["x", "y", "new", many[-1]]) == {"x": 0.0, "y": 2.0, "new": 0.0, many[-1]: 2 * 65535.0}
    finally:
        db.dispose()
    downgrade(empty_url, "0010")
    engine = make_engine(empty_url)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT prediction_id, chunk_id, row FROM logged_predictions "
                                       "WHERE prediction_id NOT LIKE 'old-%' ORDER BY prediction_id")).all()
        assert connection.execute(text("SELECT count(*) FROM logged_predictions")).scalar_one() == 3 + len(many)
    engine.dispose()
    assert [tuple(r) for r in rows] == [("new", bulk + 1, 1), ("x", chunk, 0), ("y", chunk, 1)]
