"""The alarms evaluation feeds a version's new labelled rows to its drift monitor, adaptive set
thresholds and coverage alarms in one pass (``app.monitoring.coverage_monitors.Feed``): the stored states are those the
core's ``DriftTest``, ``DtACI`` and ``CoverageAlarm`` reach fed the same rows in the same batches (the
rows new at each evaluation), to the bit, however often it is evaluated; each new row is calibrated
once per evaluation (and once more for the ECE of the newest rows, whose other rows are kept from the
evaluation before: ``app.monitoring.coverage_monitors.recent_ece``), and a version with nothing new is not read at all.

Data: the CIFAR-10 LeNet-5 outputs of ../shared/data (probabilities): temperature scaling fitted on
validation rows 0-2499, a ``dtaci`` set predictor at coverage 0.9 on rows 2500-4999, then test rows
served with prediction ids in batches of 250 (the second half with the model's logits doubled), each
batch's labels posted."""

from __future__ import annotations

import numpy as np
import pytest

import calibration as cal
from app.conformal import adaptive
from app.monitoring import alarms, coverage_monitors
from app.monitoring import store as alarm_store
from app.observations import store as observation_store
from app.platform.migrate import upgrade
from app.registry import reads as registry
from tests.helpers import load_split
from tests.service.support.clients import app_client

NAME = "lenet"
BATCH, BATCHES = 250, 6
OPTIONS = {"alpha": 0.01, "tolerance": 0.02, "half_life": 1000.0, "max_bet": 0.5, "class_tolerance": 0.02}


@pytest.fixture(scope="module")
def data():
    _, val, val_labels = load_split("cifar10_lenet5", "val")
    _, test, test_labels = load_split("cifar10_lenet5", "test")
    rows = np.random.default_rng(34).permutation(len(test_labels))[:BATCH * BATCHES]
    served = test[rows].astype(np.float64)
    half = len(rows) // 2
    served[half:] = served[half:] ** 2 / (served[half:] ** 2).sum(axis=1, keepdims=True)  # logits doubled
    return val, val_labels, served, test_labels[rows]


def _ok(response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _setup(client, data) -> int:
    val, val_labels, _, _ = data
    _ok(client.post(f"/v1/calibrators/{NAME}/versions", json={
        "method": "temperature", "probabilities": val[:2500].tolist(), "labels": val_labels[:2500].tolist()}), 201)
    stored = _ok(client.post(f"/v1/calibrators/{NAME}/versions/1/set-predictors", json={
        "score": "lac", "coverage": [0.9], "probabilities": val[2500:].tolist(), "labels": val_labels[2500:].tolist(),
        "adaptive": "dtaci"}), 201)
    _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))  # ids: labels join served rows
    return stored["id"]


def _serve(client, data, batch: int) -> None:
    _, _, served, labels = data
    part = slice(batch * BATCH, (batch + 1) * BATCH)
    ids = [f"p{i}" for i in range(part.start, part.stop)]
    _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={
        "probabilities": served[part].tolist(), "ids": ids, "outputs": ["set"], "coverage": 0.9}))
    _ok(client.post(f"/v1/calibrators/{NAME}/labels", json={"ids": ids, "labels": labels[part].tolist()}))


def _stored(client, set_predictor_id: int) -> dict:
    """Every monitor's stored row and the adaptive state, as plain values."""
    db = client.app.state.service.db
    with db.read() as session:
        calibrator_id = registry.calibrator(session, NAME).id
        monitors = {row.signal: {"state": row.state, "n_rows": row.n_rows, "ece": row.ece, "ece_rows": row.ece_rows,
                                 "log_e_value": row.log_e_value, "alarm_rows": row.alarm_rows}
                    for row in alarm_store.monitors(session, calibrator_id)}
    (state,) = adaptive.states(db, [set_predictor_id])
    return {**monitors, "adaptive": {key: state[key] for key in ("state", "level", "n_rows", "covered_rows")}}


def _reference(data, evaluations: list[int]) -> dict:
    """What main's evaluation stores, computed with the core: each monitor loaded from its stored state
    and fed, at each evaluation (after the batches in ``evaluations``), the calibrated rows new since the
    one before, as one batch."""
    val, val_labels, served, labels = data
    val = val.astype(np.float64)  # as the API reads them
    fitted = cal.create("temperature", {"input": "probabilities"}).fit(val[:2500], val_labels[:2500])
    held_out = fitted.predict_proba(val[2500:])
    split = cal.SetPredictor.fit(held_out, val_labels[2500:], score="lac", alphas=[0.1])
    drift = cal.DriftTest(**OPTIONS, n_classes=10)
    online = cal.DtACI(0.1, score="lac").fit(held_out, val_labels[2500:])
    alarm = cal.CoverageAlarm(alpha=0.1, tolerance=0.02, delta=0.01, half_life=1000.0)
    covered, start = [], 0
    for batch in evaluations:  # each evaluation starts from the stored states
        drift, online = cal.DriftTest.from_dict(drift.to_dict()), cal.DtACI.from_dict(online.to_dict())
        alarm = cal.CoverageAlarm.from_dict(alarm.to_dict())
        stop = (batch + 1) * BATCH
        probs, y = fitted.predict_proba(served[start:stop]), labels[start:stop]
        drift.update(cal.top_label_residuals(probs, y), cal.class_residuals(probs, y))
        covered.append(online.update(probs, y).covered)
        alarm.update((~split.predict_sets(probs, 0.1)[np.arange(len(y)), y]).astype(np.float64))
        start = stop
    probs, y = fitted.predict_proba(served[:start]), labels[:start]
    return {"labelled": {"state": drift.to_dict(), "n_rows": start, "ece": cal.ece(probs, y), "ece_rows": start},
            "coverage@0.9": {"state": alarm.to_dict(), "n_rows": start},
            "adaptive": {"state": online.to_dict(), "level": float(online.level), "n_rows": start,
                         "covered_rows": int(np.count_nonzero(np.concatenate(covered)))}}


@pytest.mark.parametrize("evaluations", [list(range(BATCHES)), [BATCHES - 1], [1, 2, 5]],
                         ids=["after each batch", "once at the end", "after batches 2, 3 and 6"])
def test_each_monitor_is_the_core_s_fed_the_same_rows_however_often_it_is_evaluated(sqlite_url, data, evaluations):
    upgrade(sqlite_url)
    with app_client(sqlite_url) as client:
        set_predictor_id = _setup(client, data)
        for batch in range(BATCHES):
            _serve(client, data, batch)
            if batch in evaluations:
                _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate"))
        stored = _stored(client, set_predictor_id)
        _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate"))  # nothing new: every state stays
        assert _stored(client, set_predictor_id) == stored
    expected = _reference(data, evaluations)
    for signal, values in expected.items():
        found = stored[signal]
        state = {key: found["state"][key] for key in values["state"]}  # the stored row adds its own keys
        assert state == values["state"], signal
        assert {key: found[key] for key in values if key != "state"} == {
            key: value for key, value in values.items() if key != "state"}, signal
    assert stored["labelled"]["log_e_value"] == expected["labelled"]["state"]["log_wealth"]


def test_a_new_row_is_calibrated_once_and_a_version_with_nothing_new_not_at_all(sqlite_url, data):
    """The drift monitor, the adaptive state and the coverage alarm take the same calibrated batch; the
    ECE of the newest rows is computed again only when they changed."""
    upgrade(sqlite_url)
    with app_client(sqlite_url) as client:
        _setup(client, data)
        service = client.app.state.service
        calibrated = []
        predict = service.predict

        def counted(loaded, inputs):
            out = predict(loaded, inputs)
            calibrated.append(len(out))
            return out

        for batch in range(3):
            _serve(client, data, batch)
            service.predict, calibrated[:] = counted, []
            alarms.evaluate(service, NAME)
            service.predict = predict
            # the new rows once (for every monitor), the new rows of the ECE's window (the rest kept from the
            # evaluation before), then the label-free monitor's (its reference, the first time) and its logged rows
            assert calibrated == [BATCH, BATCH] + [BATCH] * (1 if batch else 2)
        service.predict, calibrated[:] = counted, []
        evaluated = alarms.evaluate(service, NAME)
        service.predict = predict
        assert calibrated == []  # nothing new: nothing read, the stored ECE stands
        (monitor,) = [m for m in evaluated["monitors"] if m["signal"] == "labelled"]
        assert monitor["ece_rows"] == 3 * BATCH and monitor["n_rows"] == 3 * BATCH


def test_an_evaluation_reads_the_new_rows_only_as_the_stream_grows_and_its_ece_is_the_core_s(sqlite_url, data,
                                                                                              monkeypatch):
    """Each evaluation after the first reads twice the new rows (the one pass of the monitors, and the
    ECE window's new rows), however many rows came before (before, the ECE read its whole window, up
    to ``ECE_ROWS``, at every evaluation); the ECE is the core's on the newest ``ECE_ROWS`` rows to the
    bit, from the kept window and from a full read alike (a process that kept none)."""
    window = 2 * BATCH + BATCH // 2  # a window that slides, its oldest chunk read from a row inside it
    monkeypatch.setattr(alarms, "ECE_ROWS", window)
    loaded: list[int] = []
    load = observation_store.load

    def counted(session, index, dtype=np.float64):
        loaded.append(observation_store.index_rows(index))
        return load(session, index, dtype)

    monkeypatch.setattr(observation_store, "load", counted)
    val, val_labels, served, labels = data
    fitted = cal.create("temperature", {"input": "probabilities"}).fit(val[:2500].astype(np.float64),
                                                                        val_labels[:2500])
    upgrade(sqlite_url)
    with app_client(sqlite_url) as client:
        _setup(client, data)
        service = client.app.state.service
        for batch in range(BATCHES):
            _serve(client, data, batch)
            if batch == BATCHES - 1:
                coverage_monitors._kept.clear()  # as a new process: the whole window read once more
            loaded[:] = []
            evaluated = alarms.evaluate(service, NAME)
            rows = sum(loaded)
            if batch == 0:  # the new rows, the ECE's and the label-free monitor's reference: all the same rows
                assert rows == 3 * BATCH
            elif batch < BATCHES - 1:
                assert rows == 2 * BATCH, (batch, loaded)
            else:
                assert rows == BATCH + window, loaded
            stop = (batch + 1) * BATCH
            start = max(stop - window, 0)
            (monitor,) = [m for m in evaluated["monitors"] if m["signal"] == "labelled"]
            assert monitor["ece_rows"] == stop - start
            assert monitor["ece"] == cal.ece(fitted.predict_proba(served[start:stop]), labels[start:stop]), batch
