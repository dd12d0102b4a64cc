"""Calibration quality over time, drift alarms and the label-shift estimate (issue #20), through
the API on SQLite and Postgres: window metrics equal the core's on the same rows, feedback rows
are scored through the version that served them, a shifted stream raises an alarm seen in the API
and in /metrics, and EM recovers a prior shift from the prediction log."""

from __future__ import annotations

import numpy as np
import pytest
from starlette.testclient import TestClient

import calibration as cal
from app.access import keys
from app.main import create_app
from app.settings import Settings
from calibration.label_free import rows_needed
from calibration.label_shift import em_priors
from tests.helpers import load_split

NAME = "resnet"
METRICS = ("ece", "classwise_ece", "kde_ece", "nll", "brier", "accuracy", "mean_confidence")


@pytest.fixture
def client(database_url):
    """The ``client`` fixture's app (tests/service/conftest.py), with the prediction log written by a
    thread of the API process: these tests check quality, alarms and label shift over logged rows, not
    the writer process (test_prediction_log_pipe's, and this module's live stream's), whose start
    (~0.5 CPU-s, a Python process importing the app) each logging test paid."""
    app = create_app(Settings(database_url=database_url, max_body_bytes=4 * 1024 * 1024, job_engine="embedded",
                              log_writer="thread"))
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def data():
    _, val, val_labels = load_split("cifar10_resnet50_cross_entropy", "val")
    _, test, test_labels = load_split("cifar10_resnet50_cross_entropy", "test")
    return val[:2000], val_labels[:2000], test, test_labels


LABELLED_ALARM = {"version": 1, "signal": "labelled"}


def _labelled(body: dict, key: str = "monitors") -> dict:
    (monitor,) = [m for m in body[key] if m["signal"] == "labelled"]
    return monitor


def _ok(response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _fit(client, logits, labels) -> cal.Calibrator:
    _ok(client.post(f"/v1/calibrators/{NAME}/versions", json={"method": "temperature", "logits": logits.tolist(),
                                                             "labels": labels.tolist()}), 201)
    return cal.create("temperature", {"input": "logits"}).fit(logits, labels)


def _serve_and_label(client, logits, labels, start: int, reference: str = NAME) -> None:
    ids = [f"p{start + i}" for i in range(len(labels))]
    _ok(client.post(f"/v1/calibrators/{reference}/calibrate", json={"logits": logits.tolist(), "ids": ids}))
    _ok(client.post(f"/v1/calibrators/{NAME}/labels", json={"ids": ids, "labels": labels.tolist()}))


def test_window_metrics_equal_the_core_on_the_same_rows(client, data):
    val, val_labels, test, test_labels = data
    fitted = _fit(client, val, val_labels)
    logits, labels = test[:2500], test_labels[:2500]
    for start in (0, 1200):  # two appends: the middle window spans both chunks
        part = slice(start, 2500 if start else 1200)
        _ok(client.post(f"/v1/calibrators/{NAME}/observations",
                        json={"logits": logits[part].tolist(), "labels": labels[part].tolist()}), 201)
    body = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"window": "1000", "bootstrap": 0}))
    assert [w["window"] for w in body["windows"]] == ["rows 0-999", "rows 1000-1999", "rows 2000-2999"]
    assert [w["n_rows"] for w in body["windows"]] == [1000, 1000, 500]
    for window, rows in zip(body["windows"], (slice(0, 1000), slice(1000, 2000), slice(2000, 2500)), strict=True):
        calibrated, raw = fitted.predict_proba(logits[rows]), cal.softmax(logits[rows].astype(np.float64))
        assert window["versions"] == {"1": window["n_rows"]}
        assert window["calibrated"]["ece"]["estimate"] == pytest.approx(cal.ece(calibrated, labels[rows]), rel=1e-9)
        assert window["uncalibrated"]["ece"]["estimate"] == pytest.approx(cal.ece(raw, labels[rows]), rel=1e-9)
        assert window["calibrated"]["kde_ece"]["estimate"] == pytest.approx(cal.kde_ece(calibrated, labels[rows]),
                                                                             rel=1e-9)
        assert window["calibrated"]["nll"]["estimate"] == pytest.approx(cal.nll(calibrated, labels[rows]), rel=1e-9)
        assert window["label_free"]["expected_accuracy"] == pytest.approx(calibrated.max(axis=1).mean(), rel=1e-9)
        assert window["calibrated"]["ece"]["estimate"] < window["uncalibrated"]["ece"]["estimate"]
    # the newest window only, with intervals that hold their estimates
    body = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"window": "1000", "windows": 1,
                                                                    "bootstrap": 30}))
    (window,) = body["windows"]
    assert window["window"] == "rows 2000-2999"
    for metric in METRICS:  # the ECEs are biased upwards: their percentile intervals may miss the estimate
        value = window["calibrated"][metric]
        assert value["low"] <= value["high"], metric
        if metric in ("nll", "brier", "accuracy", "mean_confidence"):
            assert value["low"] <= value["estimate"] <= value["high"], metric
    day = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"window": "day", "bootstrap": 0}))
    assert sum(w["n_rows"] for w in day["windows"]) == 2500


def test_feedback_rows_are_scored_through_the_version_that_served_them(client, data):
    val, val_labels, test, test_labels = data
    _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}), 404)  # no such name yet
    first = _fit(client, val[:1000], val_labels[:1000])
    _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
    _serve_and_label(client, test[:600], test_labels[:600], 0)
    second = _fit(client, val[1000:], val_labels[1000:])
    _serve_and_label(client, test[600:1000], test_labels[600:1000], 600)
    body = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"window": "day", "bootstrap": 0}))
    (window,) = body["windows"]
    assert window["versions"] == {"1": 600, "2": 400}
    probs = np.concatenate([first.predict_proba(test[:600]), second.predict_proba(test[600:1000])])
    assert window["calibrated"]["ece"]["estimate"] == pytest.approx(cal.ece(probs, test_labels[:1000]), rel=1e-9)
    pinned = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"window": "day", "bootstrap": 0,
                                                                       "version": 1}))
    assert pinned["windows"][0]["versions"] == {"1": 1000}
    assert pinned["windows"][0]["calibrated"]["ece"]["estimate"] == pytest.approx(
        cal.ece(first.predict_proba(test[:1000]), test_labels[:1000]), rel=1e-9)
    assert client.get(f"/v1/calibrators/{NAME}/quality", params={"window": "week"}).status_code == 422
    assert client.get(f"/v1/calibrators/{NAME}/quality", params={"version": 9}).status_code == 404
    assert client.get("/v1/calibrators/nobody/quality").status_code == 404


def test_a_shifted_stream_raises_an_alarm_seen_in_the_api_and_in_metrics(client, data):
    val, val_labels, test, test_labels = data
    _fit(client, val, val_labels)
    _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
    for start in range(0, 3000, 1000):  # no shift: served as fitted
        _serve_and_label(client, test[start:start + 1000], test_labels[start:start + 1000], start)
    evaluated = _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate"))
    monitor = _labelled(evaluated)
    assert evaluated["new_alarms"] == [] and not monitor["alarm"] and monitor["n_rows"] == 3000
    assert monitor["ece"] is not None
    # the model drifts: its logits grow 4-fold (over-confident), labels unchanged
    for start in range(3000, 6000, 1000):
        _serve_and_label(client, 4 * test[start:start + 1000], test_labels[start:start + 1000], start)
        evaluated = _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate", params={"half_life": 200}))
    assert _labelled(evaluated)["n_rows"] == 6000  # changed options: restarted from the first row
    alarms = _ok(client.get(f"/v1/calibrators/{NAME}/alarms"))
    alarm = _labelled(alarms, "alarms")
    assert alarm["version"] == 1 and 3000 < alarm["alarm_rows"] <= 6000 and alarm["alarmed_at"]
    assert alarm["e_value"] >= 1 / alarm["alpha"] or alarm["max_log_e_value"] >= alarm["threshold_log_e_value"]
    scraped = client.get("/metrics").text
    assert f'calibration_drift_alarm{{calibrator="{NAME}",signal="labelled",version="1"}} 1.0' in scraped
    assert f'calibration_quality_ece{{calibrator="{NAME}",version="1"}}' in scraped
    assert client.post(f"/v1/calibrators/{NAME}/alarms/evaluate", params={"alpha": 0}).status_code == 422


def test_a_label_prior_shift_alarms_through_the_class_frequencies(client, data):
    val, val_labels, test, test_labels = data
    _fit(client, val, val_labels)
    _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
    rng = np.random.default_rng(1)
    rows = np.concatenate([rng.choice(np.flatnonzero(test_labels != 3), 1000),  # as fitted, then class 3
                           rng.choice(np.flatnonzero(test_labels == 3), 2500), rng.choice(len(test_labels), 2500)])
    rows[1000:] = rng.permutation(rows[1000:])  # 3000 labels of 5000 from class 3 (10% before)
    for start in range(0, len(rows), 1000):
        chosen = rows[start:start + 1000]
        _serve_and_label(client, test[chosen], test_labels[chosen], start)
    evaluated = _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate", params={"half_life": 200}))
    monitor = _labelled(evaluated)
    assert LABELLED_ALARM in evaluated["new_alarms"] and monitor["alarm"] and 1000 < monitor["alarm_rows"] <= 6000
    again = _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate", params={"half_life": 200}))
    assert again["new_alarms"] == [] and _labelled(again)["alarm_rows"] == monitor["alarm_rows"]


def test_a_prior_shift_in_the_logged_predictions_alarms_without_labels(client, data):
    val, val_labels, test, test_labels = data
    _fit(client, val, val_labels)
    _ok(client.post(f"/v1/calibrators/{NAME}/observations",  # the reference: the validation rows
                    json={"logits": val.tolist(), "labels": val_labels.tolist()}), 201)
    _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
    rng = np.random.default_rng(3)
    plain = rng.choice(len(test_labels), 2000)
    shifted = np.concatenate([rng.choice(np.flatnonzero(test_labels == 3), 2100), rng.choice(len(test_labels), 900)])
    for start, rows in ((0, plain), (2000, rng.permutation(shifted))):
        for at in range(0, len(rows), 1000):
            _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={"logits": test[rows[at:at + 1000]].tolist()}))
        evaluated = _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate", params={"half_life": 200}))
        (monitor,) = evaluated["monitors"]  # no labels: only the label-free monitor
        assert monitor["signal"] == "label_free" and monitor["n_rows"] == start + len(rows)
        assert evaluated["new_alarms"] == ([] if start == 0 else [{"version": 1, "signal": "label_free"}])
    assert 2000 < monitor["alarm_rows"] <= 5000
    scraped = client.get("/metrics").text
    assert f'calibration_drift_alarm{{calibrator="{NAME}",signal="label_free",version="1"}} 1.0' in scraped


def test_the_label_shift_estimate_from_the_prediction_log(client, data):
    val, val_labels, test, test_labels = data
    fitted = _fit(client, val, val_labels)
    _ok(client.post(f"/v1/calibrators/{NAME}/observations",
                    json={"logits": val.tolist(), "labels": val_labels.tolist()}), 201)
    _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
    rng = np.random.default_rng(0)
    priors = np.full(10, 0.04)
    priors[3] = 0.64
    rows = np.concatenate([rng.choice(np.flatnonzero(test_labels == c), size=int(3000 * p)) for c, p in
                           enumerate(priors)])
    ids = [f"s{i}" for i in range(len(rows))]
    _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={"logits": test[rows].tolist(), "ids": ids}))
    body = _ok(client.get(f"/v1/calibrators/{NAME}/label-shift"))
    assert body["n_predictions"] == len(rows) and body["n_source_rows"] == 2000
    source_priors = np.bincount(val_labels, minlength=10) / len(val_labels)
    np.testing.assert_allclose(body["source_priors"], source_priors)
    expected = em_priors(fitted.predict_proba(test[rows]), source_priors).priors
    np.testing.assert_allclose(body["em"]["priors"], expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(body["em"]["priors"], priors, atol=0.05)
    np.testing.assert_allclose(body["bbse"]["priors"], priors, atol=0.05)
    assert body["label_free"]["predicted_class_distribution"][3] > 0.5
    assert client.get("/v1/calibrators/nobody/label-shift").status_code == 404


def test_scopes(sqlite_url):
    from app.platform.migrate import upgrade

    upgrade(sqlite_url)
    app = create_app(Settings(database_url=sqlite_url, api_keys_enabled=True, api_key_cache_seconds=0))
    read = keys.create_key(app.state.db, "reader", ["read"])[1]
    with TestClient(app) as client:
        headers = {"x-api-key": read}
        assert client.get(f"/v1/calibrators/{NAME}/quality").status_code == 401
        assert client.get(f"/v1/calibrators/{NAME}/quality", headers=headers).status_code == 404
        assert client.get(f"/v1/calibrators/{NAME}/alarms", headers=headers).status_code == 404
        assert client.get(f"/v1/calibrators/{NAME}/label-shift", headers=headers).status_code == 404
        assert client.post(f"/v1/calibrators/{NAME}/alarms/evaluate", headers=headers).status_code == 403


def test_the_bootstrap_budget_cuts_resamples_and_says_so(client, data, monkeypatch):
    val, val_labels, test, test_labels = data
    _fit(client, val, val_labels)
    _ok(client.post(f"/v1/calibrators/{NAME}/observations",
                    json={"logits": test[:500].tolist(), "labels": test_labels[:500].tolist()}), 201)
    monkeypatch.setattr("app.monitoring.quality.BOOTSTRAP_ENTRIES", 500 * 10 * 2 * 7)
    body = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"bootstrap": 50}))
    assert body["bootstrap"] == 7 and body["bootstrap_asked"] == 50
    assert body["windows"][0]["calibrated"]["nll"]["low"] is not None
    monkeypatch.setattr("app.monitoring.quality.BOOTSTRAP_ENTRIES", 10)
    body = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"bootstrap": 50}))
    assert body["bootstrap"] == 0 and body["windows"][0]["calibrated"]["nll"]["low"] is None


def test_the_quality_chart(client, data):
    val, val_labels, test, test_labels = data
    _fit(client, val, val_labels)
    _ok(client.post(f"/v1/calibrators/{NAME}/observations",
                    json={"logits": test[:1500].tolist(), "labels": test_labels[:1500].tolist()}), 201)
    params = {"window": "500", "bootstrap": 20}
    png = client.get(f"/v1/calibrators/{NAME}/quality", params=params, headers={"accept": "image/png"})
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG")
    svg = client.get(f"/v1/calibrators/{NAME}/quality", params=params, headers={"accept": "image/svg+xml"})
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert b"rows 1000-1499" in svg.content and b"uncalibrated" in svg.content
    assert client.get("/v1/calibrators/nobody/quality", headers={"accept": "image/png"}).status_code == 404


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_live_stream_with_late_labels_and_a_shift(kind, request, tmp_path, data):
    """On a real server (uvicorn in a subprocess): predictions served with logging on, their labels
    posted later in a shuffled order, a drift injected half-way; the alarm shows in the API and in
    the Prometheus series, and the quality windows show the calibrated ECE rising."""
    import httpx

    from tests.service.support.live import live_server

    url = request.getfixturevalue(f"migrated_{kind}_url")
    val, val_labels, test, test_labels = data
    rng = np.random.default_rng(2)
    with live_server(url, env={"CALIBRATION_LOG_FLUSH_SECONDS": "0.2"}, log_file=tmp_path / "server.log",
                     migrated=True) as base, \
            httpx.Client(base_url=base, timeout=120) as client:
        _ok(client.post(f"/v1/calibrators/{NAME}/versions", json={"method": "temperature", "logits": val.tolist(),
                                                                 "labels": val_labels.tolist()}), 201)
        _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
        served = []
        for start in range(0, 6000, 500):  # from row 3000 on, the model's logits grow 4-fold
            logits = test[start:start + 500] * (4.0 if start >= 3000 else 1.0)
            ids = [f"p{start + i}" for i in range(500)]
            _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={"logits": logits.tolist(), "ids": ids}))
            served.append(ids)
            if start in (2500, 5500):  # labels arrive later, shuffled, in two deliveries
                pending = [pid for batch in served for pid in batch]
                order = rng.permutation(len(pending))
                ids = [pending[i] for i in order]
                labels = [int(test_labels[int(pid[1:])]) for pid in ids]
                assert _ok(client.post(f"/v1/calibrators/{NAME}/labels",
                                       json={"ids": ids, "labels": labels}))["labelled"] == len(ids)
                served = []
                evaluated = _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate"))
                assert (LABELLED_ALARM in evaluated["new_alarms"]) == (start == 5500), evaluated
        alarm = _labelled(_ok(client.get(f"/v1/calibrators/{NAME}/alarms")), "alarms")
        assert alarm["version"] == 1 and 3000 < alarm["alarm_rows"] <= 6000
        scraped = client.get("/metrics").text
        assert f'calibration_drift_alarm{{calibrator="{NAME}",signal="labelled",version="1"}} 1.0' in scraped
        windows = _ok(client.get(f"/v1/calibrators/{NAME}/quality", params={"window": "3000", "bootstrap": 0}))
        before, after = (w["calibrated"]["ece"]["estimate"] for w in windows["windows"])
        assert after > before + 0.02


def test_the_label_free_monitor_keeps_alpha_with_a_small_reference(client, data):
    """A reference of 100 labelled rows and 4000 logged predictions of the same distribution: no
    alarm (against the reference's plain means, its sampling error alone raised one), and the
    monitor says what its reference can see and how many reference rows a drift of 0.05 needs."""
    val, val_labels, test, test_labels = data
    _fit(client, val, val_labels)
    _ok(client.post(f"/v1/calibrators/{NAME}/observations",
                    json={"logits": val[:100].tolist(), "labels": val_labels[:100].tolist()}), 201)
    _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
    rows = np.random.default_rng(4).choice(len(test_labels), 4000)
    for at in range(0, len(rows), 1000):
        _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={"logits": test[rows[at:at + 1000]].tolist()}))
    evaluated = _ok(client.post(f"/v1/calibrators/{NAME}/alarms/evaluate", params={"half_life": 200}))
    (monitor,) = evaluated["monitors"]
    assert monitor["signal"] == "label_free" and monitor["n_rows"] == 4000
    assert evaluated["new_alarms"] == [] and not monitor["alarm"]
    reference = monitor["reference"]
    assert reference["rows"] == 100 and reference["alpha"] == pytest.approx(0.005)
    assert monitor["alpha"] == pytest.approx(0.01) and monitor["threshold_log_e_value"] == pytest.approx(np.log(200))
    assert reference["detectable_confidence_drift"] == pytest.approx(0.02 + reference["confidence_radius"])
    again = _ok(client.get(f"/v1/calibrators/{NAME}/alarms", params={"drift": 0.05}))
    needed = again["monitors"][0]["reference"]["rows_needed"]
    assert needed == rows_needed(0.05, 0.02, 0.01, sd=reference["confidence_sd"]) and needed > 100


def test_the_label_shift_suggestion_carries_its_evidence_and_shrinkage(client, data):
    """The suggestion of GET .../label-shift: EM on a BCTS fitted to the labelled observations, the
    likelihood-ratio test and the shrinkage, equal to the core's on the same rows; a strong shift is
    adjusted, to priors near the truth."""
    from calibration.prior_shift import bcts_fit, prior_shift

    val, val_labels, test, test_labels = data
    _fit(client, val, val_labels)
    _ok(client.post(f"/v1/calibrators/{NAME}/observations",
                    json={"logits": val.tolist(), "labels": val_labels.tolist()}), 201)
    _ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
    rng = np.random.default_rng(0)
    priors = np.full(10, 0.04)
    priors[3] = 0.64
    rows = np.concatenate([rng.choice(np.flatnonzero(test_labels == c), size=int(2000 * p)) for c, p in
                           enumerate(priors)])
    _ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={"logits": test[rows].tolist()}))
    body = _ok(client.get(f"/v1/calibrators/{NAME}/label-shift"))
    suggestion = body["suggestion"]
    source_priors = np.bincount(val_labels, minlength=10) / len(val_labels)
    bcts = bcts_fit(np.log(np.clip(cal.softmax(val), 1e-300, 1)), val_labels)
    expected = prior_shift(bcts.predict_proba(np.log(np.clip(cal.softmax(test[rows]), 1e-300, 1))), source_priors)
    assert suggestion["calibration"]["method"] == "bias_corrected_temperature"
    assert suggestion["calibration"]["temperature"] == pytest.approx(bcts.temperature, rel=1e-4)
    assert suggestion["test"]["statistic"] == pytest.approx(expected.statistic, rel=1e-3)
    assert suggestion["test"]["p_value"] < 1e-10 and suggestion["test"]["degrees_of_freedom"] == 9
    assert suggestion["adjust"] and suggestion["shrinkage"] == pytest.approx(expected.shrinkage, rel=1e-3)
    np.testing.assert_allclose(suggestion["suggested_priors"], expected.suggested, atol=1e-4)
    error = np.abs(np.asarray(suggestion["suggested_priors"]) - priors).sum()
    assert error < 0.25 * np.abs(source_priors - priors).sum()
    plain = _ok(client.get(f"/v1/calibrators/{NAME}/label-shift", params={"alpha": 1e-6, "last": 300}))
    assert plain["suggestion"]["test"]["alpha"] == 1e-6
    assert client.get(f"/v1/calibrators/{NAME}/label-shift", params={"alpha": 0}).status_code == 422
