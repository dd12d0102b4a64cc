"""The /v1 API against a real database (SQLite and Postgres), in process."""

from __future__ import annotations

import io

import numpy as np
import pytest

import calibration as cal
from app.platform.migrate import head_revision
from app.registry.schemas import EXAMPLE_LABELS, EXAMPLE_LOGITS
from tests.helpers import make_reference_input
from tests.service.support.fits import LABELS, LOGITS, fit, npy


def test_fit_returns_the_version_with_parameters_diagnostics_and_report(client):
    response = fit(client, description="first", tags={"model": "resnet"}, class_names=list("abcd"))
    version = response.json()
    expected = cal.TemperatureScaling().fit(LOGITS, LABELS)
    assert version["version"] == 1 and version["method"] == "temperature"
    assert version["parameters"] == {"temperature": expected.temperature_}
    assert version["diagnostics"]["converged"] is True
    assert version["n_classes"] == 4 and version["n_samples"] == 400
    assert version["class_names"] == list("abcd") and version["tags"] == {"model": "resnet"}
    report = version["report"]
    raw, calibrated = cal.softmax(LOGITS), expected.predict_proba(LOGITS)
    assert report["before"]["metrics"]["ece"] == cal.ece(raw, LABELS)
    assert report["after"]["metrics"]["nll"] == cal.nll(calibrated, LABELS)
    assert report["calibration_gain"] == pytest.approx(cal.calibration_gain(raw, calibrated, LABELS), abs=1e-15)
    assert response.headers["location"] == "/v1/calibrators/demo/versions/1"
    assert response.headers["etag"] == f'"{version["checksum"]}"'


def test_versions_are_numbered_and_never_reused(client):
    assert [fit(client).json()["version"] for _ in range(3)] == [1, 2, 3]
    assert client.delete("/v1/calibrators/demo/versions/3").status_code == 204
    assert fit(client).json()["version"] == 4
    listing = client.get("/v1/calibrators/demo/versions").json()
    assert [v["version"] for v in listing["versions"]] == [4, 2, 1]
    overview = client.get("/v1/calibrators/demo").json()
    assert overview["latest_version"] == 4 and overview["n_versions"] == 3


def test_calibrate_latest_alias_and_pinned(client):
    fit(client)
    fit(client, method="ensemble_temperature")
    ts = cal.TemperatureScaling().fit(LOGITS, LABELS)
    ets = cal.EnsembleTemperatureScaling().fit(LOGITS, LABELS)
    batch = LOGITS[:16]
    latest = client.post("/v1/calibrators/demo/calibrate", json={"logits": batch.tolist()}).json()
    assert latest["version"] == 2
    assert np.array_equal(np.array(latest["probabilities"]), ets.predict_proba(batch))
    pinned = client.post("/v1/calibrators/demo/versions/1/calibrate", json={"logits": batch.tolist()}).json()
    assert np.array_equal(np.array(pinned["probabilities"]), ts.predict_proba(batch))
    assert client.put("/v1/calibrators/demo/aliases/production", json={"version": 1}).json() == {
        "name": "demo", "alias": "production", "version": 1}
    aliased = client.post("/v1/calibrators/demo@production/calibrate",
                          json={"logits": batch.tolist(), "outputs": ["predicted_class", "confidence"]}).json()
    assert aliased["version"] == 1 and "probabilities" not in aliased
    assert aliased["predicted_class"] == batch.argmax(axis=1).tolist()
    assert aliased["confidence"] == ts.predict_proba(batch).max(axis=1).tolist()
    # moving the alias is seen by the next call
    client.put("/v1/calibrators/demo/aliases/production", json={"version": 2})
    moved = client.post("/v1/calibrators/demo@production/calibrate", json={"logits": batch.tolist()}).json()
    assert moved["version"] == 2
    assert client.get("/v1/calibrators/demo").json()["aliases"] == {"production": 2}
    assert client.get("/v1/calibrators/demo/versions/2").json()["aliases"] == ["production"]


def test_binary_npy_in_and_out(client):
    fit(client)
    ts = cal.TemperatureScaling().fit(LOGITS, LABELS)
    batch = LOGITS[:64].astype(np.float32)
    response = client.post("/v1/calibrators/demo/calibrate", content=npy(batch),
                           headers={"content-type": "application/x-npy", "accept": "application/x-npy"})
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-npy"
    probabilities = np.load(io.BytesIO(response.content), allow_pickle=False)
    # a float32 question gets a float32 answer: the float64 probabilities, cast once
    assert probabilities.dtype == np.float32
    assert np.array_equal(probabilities, ts.predict_proba(batch).astype(np.float32))


def test_fit_from_npz_with_options_in_the_query(client):
    buffer = io.BytesIO()
    np.savez(buffer, logits=LOGITS.astype(np.float32), labels=LABELS)
    response = client.post("/v1/calibrators/npz/versions?method=expectation_consistency&options={\"top_n\":2}",
                           content=buffer.getvalue(), headers={"content-type": "application/x-npz"})
    assert response.status_code == 201, response.text
    ec = cal.ExpectationConsistency(top_n=2).fit(LOGITS.astype(np.float32), LABELS)
    assert response.json()["parameters"]["temperature"] == ec.temperature_


def test_probabilities_and_scores_inputs(client):
    probs = cal.softmax(LOGITS)
    response = client.post("/v1/calibrators/p/versions", json={
        "method": "isotonic_multiclass", "probabilities": probs.tolist(), "labels": LABELS.tolist()})
    assert response.status_code == 201 and response.json()["input"] == "probabilities"
    irm = cal.IsotonicMulticlass(input="probabilities").fit(probs, LABELS)
    out = client.post("/v1/calibrators/p/calibrate", json={"probabilities": probs[:5].tolist()}).json()
    assert np.array_equal(np.array(out["probabilities"]), irm.predict_proba(probs[:5]))
    wrong_kind = client.post("/v1/calibrators/p/calibrate", json={"logits": LOGITS[:5].tolist()})
    assert wrong_kind.status_code == 422 and "fitted on probabilities" in wrong_kind.json()["detail"]
    scores = LOGITS[:, 1] - LOGITS[:, 0]
    binary = (LABELS == 1).astype(int)
    response = client.post("/v1/calibrators/s/versions", json={
        "method": "platt", "scores": scores.tolist(), "labels": binary.tolist()})
    assert response.status_code == 201, response.text
    platt = cal.PlattScaling(input="scores").fit(scores, binary)
    out = client.post("/v1/calibrators/s/calibrate", json={"scores": scores[:3].tolist()}).json()
    assert np.array_equal(np.array(out["probabilities"]), platt.predict_proba(scores[:3]))


def test_report_matches_the_core_and_draws_images(client):
    fit(client)
    ts = cal.TemperatureScaling().fit(LOGITS, LABELS)
    test_logits, test_labels = make_reference_input(n=300, k=4, seed=22)
    body = {"logits": test_logits.tolist(), "labels": test_labels.tolist(), "n_bins": 10,
            "bootstrap": 50, "seed": 3}
    report = client.post("/v1/calibrators/demo/report", json=body).json()
    calibrated = ts.predict_proba(test_logits)
    assert report["after"]["metrics"]["ece"] == cal.ece(calibrated, test_labels, n_bins=10)
    assert report["after"]["metrics"]["kde_ece"] == cal.kde_ece(calibrated, test_labels)
    interval = cal.bootstrap_interval(cal.ece, calibrated, test_labels, n_resamples=50, seed=3, n_bins=10)
    assert report["after"]["intervals"]["ece"]["low"] == interval.low
    assert report["after"]["reliability_diagram"]["count"] == cal.reliability_diagram(
        calibrated, test_labels, n_bins=10).count.tolist()
    png = client.post("/v1/calibrators/demo/report", json=body, headers={"accept": "image/png"})
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    svg = client.post("/v1/calibrators/demo/versions/1/report", json=body, headers={"accept": "image/svg+xml"})
    assert svg.headers["content-type"].startswith("image/svg+xml") and b"demo v1" in svg.content


def test_stateless_metrics_and_methods(client):
    probs = cal.softmax(LOGITS / 1.3)
    result = client.post("/v1/metrics", json={"probabilities": probs.tolist(), "labels": LABELS.tolist()}).json()
    assert result["metrics"]["brier"] == cal.brier(probs, LABELS)
    assert result["metrics"]["adaptive_ece"] == cal.adaptive_ece(probs, LABELS)
    methods = client.get("/v1/methods").json()["methods"]
    assert {m["name"] for m in methods} == set(cal.METHODS)


def test_listing_is_paginated(client):
    for name in ["c", "a", "e", "b", "d"]:
        client.post(f"/v1/calibrators/{name}/versions",
                    json={"method": "temperature", "logits": EXAMPLE_LOGITS, "labels": EXAMPLE_LABELS})
    first = client.get("/v1/calibrators?page_size=2").json()
    assert [c["name"] for c in first["calibrators"]] == ["a", "b"]
    second = client.get(f"/v1/calibrators?page_size=2&page_token={first['next_page_token']}").json()
    third = client.get(f"/v1/calibrators?page_size=2&page_token={second['next_page_token']}").json()
    assert [c["name"] for c in second["calibrators"] + third["calibrators"]] == ["c", "d", "e"]
    assert third["next_page_token"] is None


def test_etag_and_conditional_get(client):
    etag = fit(client).headers["etag"]
    response = client.get("/v1/calibrators/demo/versions/1", headers={"if-none-match": etag})
    assert response.status_code == 304


def test_deletes_and_alias_conflicts(client):
    fit(client)
    fit(client)
    client.put("/v1/calibrators/demo/aliases/production", json={"version": 1})
    blocked = client.delete("/v1/calibrators/demo/versions/1")
    assert blocked.status_code == 409 and "production" in blocked.json()["detail"]
    assert client.delete("/v1/calibrators/demo/aliases/production").status_code == 204
    assert client.delete("/v1/calibrators/demo/aliases/production").status_code == 404
    assert client.delete("/v1/calibrators/demo/versions/1").status_code == 204
    assert client.get("/v1/calibrators/demo/versions/1").status_code == 404
    client.put("/v1/calibrators/demo/aliases/staging", json={"version": 2})
    assert client.delete("/v1/calibrators/demo").status_code == 204
    assert client.get("/v1/calibrators/demo").status_code == 404
    # a re-created name starts again at 1 and is not served from the old cache entry
    fit(client, method="expectation_consistency")
    out = client.post("/v1/calibrators/demo/calibrate", json={"logits": LOGITS[:3].tolist()}).json()
    ec = cal.ExpectationConsistency().fit(LOGITS, LABELS)
    assert out["version"] == 1 and np.array_equal(np.array(out["probabilities"]), ec.predict_proba(LOGITS[:3]))


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "detail"),
    [
        ("post", "/v1/calibrators/demo/calibrate", {"json": {"logits": [[1.0, 2.0]]}}, 404, "no calibrator named"),
        ("post", "/v1/calibrators/x/versions", {"content": b"{", "headers": {"content-type": "application/json"}},
         400, "malformed JSON"),
        ("post", "/v1/calibrators/x/versions", {"content": b"a=b"}, 415, "unsupported Content-Type"),
        ("post", "/v1/calibrators/x/versions", {"json": {"method": "nope", "logits": [[1, 2], [2, 1]],
                                                           "labels": [0, 0]}}, 422, "unknown method"),
        ("post", "/v1/calibrators/x/versions", {"json": {"method": "temperature", "logits": [[1, 2], [2, 1]]}},
         422, "labels are required"),
        ("post", "/v1/calibrators/x/versions", {"json": {"method": "temperature", "logit": [[1, 2]],
                                                           "labels": [0]}}, 422, "logit: unknown field"),
        ("post", "/v1/calibrators/bad%2Fname/versions", {"json": {}}, 404, "no such endpoint"),
        ("post", "/v1/calibrators/" + "n" * 200 + "/versions", {"json": {}}, 422, "invalid calibrator name"),
        ("get", "/v1/calibrators/demo/versions/0", {}, 422, "greater than or equal to 1"),
        ("put", "/v1/calibrators/demo/aliases/1bad", {"json": {"version": 1}}, 422, "invalid alias"),
        ("get", "/v1/calibrators?page_token=%%%", {}, 422, "invalid page_token"),
    ],
)
def test_errors_are_problem_details(client, method, path, kwargs, status, detail):
    response = getattr(client, method)(path, **kwargs)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["status"] == status and detail in problem["detail"]


def test_body_limit_is_enforced_while_streaming(client):
    limit = client.app.state.settings.max_body_bytes

    def chunks():
        for _ in range(limit // 65536 + 2):
            yield b" " * 65536

    response = client.post("/v1/calibrators/x/versions", content=chunks(),
                           headers={"content-type": "application/json"})
    assert response.status_code == 413
    declared = client.post("/v1/calibrators/x/versions", content=b"{}",
                           headers={"content-type": "application/json", "content-length": str(limit + 1)})
    assert declared.status_code == 413


def test_health_readiness_and_prometheus(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["schema"] == head_revision()
    client.get("/v1/methods")
    assert 'calibration_requests_total{method="GET",route="/v1/methods",status="200"}' in client.get("/metrics").text
    assert client.get("/healthz", headers={"x-request-id": "abc-123"}).headers["x-request-id"] == "abc-123"


def test_prometheus_labels_the_docs_pages_by_path_and_only_unrouted_requests_as_unmatched(client):
    """FastAPI marks only its own routes in the scope; the docs pages and the OpenAPI document are
    plain Starlette routes and must not be counted with the 404s."""
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect", "/no-such-page"):
        client.get(path)
    exposed = client.get("/metrics").text
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        assert f'calibration_requests_total{{method="GET",route="{path}",status="200"}} 1.0' in exposed
    assert 'calibration_requests_total{method="GET",route="unmatched",status="404"} 1.0' in exposed
    assert 'route="unmatched",status="200"' not in exposed
