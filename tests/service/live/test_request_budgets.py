"""Every request within a budget (#17), checked before the work starts: decoded array bytes
(``CALIBRATION_MAX_ARRAY_BYTES``, from the .npy headers and the .npz declared sizes, before
decompressing), array-carrying JSON bytes (``CALIBRATION_MAX_JSON_BYTES``, before parsing), n·k
entries (``CALIBRATION_MAX_ENTRIES``), fitted parameters (``CALIBRATION_MAX_PARAMETERS``, estimated
from n, k and the options) and a maximum for every option that sets an amount of work."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

import calibration as cal
from app.wire.costs import estimated_fit_seconds, fitted_parameters, isotonic_blocks, solver_entries
from tests.service.support.bodies import zip_bomb
from tests.service.support.live import LiveServer

JSON_FIT = {"method": "temperature", "logits": [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [-0.5, 0.2, 2.2], [1.0, 1.1, 0.9]],
            "labels": [0, 1, 2, 0]}


@pytest.fixture
def client(database_url):
    """The ``client`` fixture's app (tests/service/conftest.py), with the prediction log written by a
    thread of the API process: the label-shift and label tests check what a read loads, not the writer
    process (test_prediction_log_pipe's), whose start (~0.5 CPU-s) each logging test paid."""
    from starlette.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings
    app = create_app(Settings(database_url=database_url, max_body_bytes=4 * 1024 * 1024, job_engine="embedded",
                              log_writer="thread"))
    with TestClient(app) as test_client:
        yield test_client


def _count(value) -> int:
    if isinstance(value, dict):
        return sum(_count(v) for v in value.values())
    if isinstance(value, list):
        return sum(_count(v) for v in value)
    return int(isinstance(value, int | float) and not isinstance(value, bool))


def _options(method: str) -> dict:
    if method == "composition":
        return {"steps": [{"method": "temperature"}, {"method": "isotonic_one_vs_all"},
                          {"method": "histogram_binning", "options": {"n_bins": 40}}]}
    if method == "histogram_binning":
        return {"n_bins": 25, "strategy": "quantile"}
    return {}


@pytest.mark.parametrize(("n", "k"), [(300, 2), (600, 4), (2000, 7)])
def test_the_parameter_estimate_bounds_what_every_method_stores(n, k):
    rng = np.random.default_rng(n + k)
    labels = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) * 2 + 3 * np.eye(k)[labels]
    for method in cal.METHODS:
        options = _options(method)
        if method == "platt" and k != 2:
            continue
        try:
            calibrator = cal.create(method, options).fit(logits, labels)
        except ValueError:
            continue
        stored = _count(calibrator.to_dict()["params"])
        estimate = fitted_parameters(method, calibrator.options, n, k)
        assert stored <= estimate, (method, stored, estimate)


def test_options_that_set_the_work_count_in_the_fit_cost():
    """auto over 20 class_temperature candidates at their largest grid and rounds, 20 folds, on 40
    rows: 420 fits of up to 0.4 s each estimated past the default 10 s sync budget (a job, not a
    request thread for minutes), while the default options cost what they did."""
    worst = {"method": "class_temperature", "options": {"grid_size": 1000, "max_rounds": 100}}
    candidates = [{**worst, "name": f"c{i}"} for i in range(20)]
    assert estimated_fit_seconds("auto", {"candidates": candidates, "folds": 20}, 40, 3) > 10
    assert estimated_fit_seconds("class_temperature", {"grid_size": 41, "max_rounds": 10}, 5000, 10) < 0.06
    steps = [{"method": "temperature"}, worst]
    assert estimated_fit_seconds("composition", {"steps": steps}, 40, 3) >= \
        estimated_fit_seconds("class_temperature", worst["options"], 40, 3)


def test_isotonic_blocks_by_brute_force():
    """The bound on constant blocks against the most an isotonic fit of 0/1 targets reaches, by
    exhaustive search over every target sequence of small lengths."""
    from scipy.optimize import isotonic_regression
    for length in range(1, 13):
        most = 0
        for bits in range(2 ** length):
            y = np.array([(bits >> i) & 1 for i in range(length)], float)
            most = max(most, len(np.unique(isotonic_regression(y).x)))
        assert most <= isotonic_blocks(length), length


def test_dirichlet_of_100000_classes_on_3_rows_is_refused_up_front(client):
    logits = np.zeros((3, 100_000))
    logits[[0, 1, 2], [0, 1, 2]] = 2.0
    start = time.perf_counter()
    response = client.post("/v1/calibrators/big/versions", json={"method": "dirichlet", "logits": logits.tolist(),
                                                                "labels": [0, 1, 2]})
    assert time.perf_counter() - start < 5
    assert response.status_code == 422
    assert "10000100000 fitted parameters, over the limit of 2000000 (CALIBRATION_MAX_PARAMETERS)" in \
        response.json()["detail"]


def test_vector_scaling_of_3000_classes_is_refused_for_its_hessian(client):
    """(2k)² = 36 million Hessian entries (288 MB, and minutes of factorisations) on 3 rows."""
    logits = np.zeros((3, 3000))
    logits[[0, 1, 2], [0, 1, 2]] = 2.0
    response = client.post("/v1/calibrators/v/versions", json={"method": "vector", "logits": logits.tolist(),
                                                                "labels": [0, 1, 2]})
    assert response.status_code == 422
    assert response.json()["detail"].startswith(
        "fitting vector on 3000 classes needs a 36000000-entry Hessian (vector scaling's (2k)², or its class blocks), "
        "over the limit "
        "of 16777216 entries (CALIBRATION_MAX_ENTRIES)")
    assert estimated_fit_seconds("vector", {}, 3000, 1000) > 60  # measured 67 s


def test_matrix_and_dirichlet_count_their_class_blocks_where_the_fit_builds_them():
    # k = 100: blocks and inverses of (k+1)² each, per class; k <= 36 (trust-ncg) and k >= 203
    # (the blocks' diagonals only) hold no dense matrix beyond O(k²)
    assert solver_entries("dirichlet", {}, 5000, 100) == solver_entries("matrix", {}, 5000, 100) == 2 * 100 * 101**2
    assert solver_entries("dirichlet", {}, 5000, 36) == solver_entries("dirichlet", {}, 5000, 203) == 0
    assert 2 * 202 * 203**2 <= 1 << 24  # within the default request budget wherever the blocks are built


def test_two_million_histogram_bins_is_a_422_naming_the_maximum(client):
    response = client.post("/v1/calibrators/h/versions", json={**JSON_FIT, "method": "histogram_binning",
                                                                "options": {"n_bins": 2_000_000}})
    assert response.status_code == 422
    assert response.json()["detail"] == "option 'n_bins' must be <= 10000, got 2000000"


def test_a_comparison_candidate_over_the_parameter_limit_is_refused(client):
    client.app.state.service.max_parameters = 50
    response = client.post("/v1/compare", json={"logits": (np.eye(8) * 3).tolist() * 2, "labels": list(range(8)) * 2,
                                                "folds": 2, "methods": ["temperature", "dirichlet"]})
    assert response.status_code == 422
    assert "(CALIBRATION_MAX_PARAMETERS)" in response.json()["detail"]


def test_the_published_option_schema_has_the_maxima(client):
    methods = {m["name"]: m for m in client.get("/v1/methods").json()["methods"]}
    options = {name: m["options"]["properties"] for name, m in methods.items()}
    assert options["histogram_binning"]["n_bins"]["maximum"] == 10_000
    assert options["class_temperature"]["grid_size"]["maximum"] == 1000
    assert options["class_temperature"]["max_rounds"]["maximum"] == 100
    assert options["class_temperature"]["n_bins"]["maximum"] == 1000
    for name in ("vector", "matrix", "dirichlet"):
        assert options[name]["max_iterations"]["maximum"] == 10_000
    assert options["auto"]["folds"]["maximum"] == 20
    assert options["auto"]["candidates"]["maxItems"] == 20
    assert options["composition"]["steps"]["maxItems"] == 10


def test_more_than_20_auto_candidates_is_a_422(client):
    candidates = [{"method": "temperature", "name": f"t{i}"} for i in range(21)]
    response = client.post("/v1/calibrators/a/versions", json={**JSON_FIT, "method": "auto",
                                                                "options": {"candidates": candidates}})
    assert response.status_code == 422
    assert response.json()["detail"] == "option 'candidates' may list at most 20 items, got 21"


def test_json_over_its_cap_is_a_413_before_parsing(client):
    service = client.app.state.service
    service.limits = dataclasses.replace(service.limits, json_bytes=4096)
    body = json.dumps({**JSON_FIT, "logits": [[0.5, 0.25, 0.125]] * 400, "labels": [0] * 400}).encode()
    response = client.post("/v1/calibrators/j/versions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert response.json()["detail"].startswith(
        f"a JSON body with arrays may be 4096 bytes at most (CALIBRATION_MAX_JSON_BYTES), got {len(body)}")


def test_json_entries_over_the_cap_are_a_413(client):
    service = client.app.state.service
    service.limits = dataclasses.replace(service.limits, entries=1000)
    response = client.post("/v1/metrics", json={"probabilities": [[0.5, 0.5]] * 600, "labels": [0] * 600})
    assert response.status_code == 413
    assert response.json()["detail"] == ("the arrays hold 1800 entries, over the limit of 1000 entries per request "
                                         "(CALIBRATION_MAX_ENTRIES)")


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


BODY_LIMIT = 8 << 20


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_a_zip_bomb_leaves_the_servers_peak_memory_within_twice_the_body_limit(tmp_path):
    """A 310 kB .npz that inflates to 320 MB, one whose header declares 800 GB, and one of 25
    million int8 entries, sent to /v1/metrics and a fit: each a 413 having inflated at most a few
    kB, and the server's peak resident memory (VmHWM) grows by less than 2 x the body limit."""
    server = LiveServer(f"sqlite:///{tmp_path / 'bomb.db'}", env={"CALIBRATION_MAX_BODY_BYTES": str(BODY_LIMIT)})
    base = server.start()
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            http.post("/v1/metrics", json={"probabilities": [[0.2, 0.8]] * 4, "labels": [1, 0, 1, 1]})
            before = _peak_rss_kib(server.process.pid)
            bombs = [zip_bomb(), zip_bomb((10**6, 10**5), data_bytes=64), zip_bomb((5000, 5000), "|i1", data_bytes=64)]
            for path in ("/v1/metrics", "/v1/calibrators/bomb/versions?method=temperature"):
                for bomb in bombs:
                    assert len(bomb) < BODY_LIMIT
                    response = http.post(path, content=bomb, headers={"content-type": "application/x-npz"})
                    assert response.status_code == 413, response.text
                    assert "(CALIBRATION_MAX_" in response.json()["detail"]
            grown = _peak_rss_kib(server.process.pid) - before
    finally:
        server.stop()
    print(f"peak RSS {before} KiB before the bombs, grew by {grown} KiB")
    assert grown * 1024 < 2 * BODY_LIMIT, f"peak RSS grew by {grown} KiB"


# -- reads of stored rows (#34): exact rows, a budget, peak memory bounded by it ----------------------

SHIFT = "shifted"


def _shift_setup(client, logged_parts: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A temperature fit on 2000 real CIFAR-10 rows, those rows uploaded as observations, and test
    rows served with logging on in parts of ``logged_parts`` rows (one flush, one chunk, each);
    returns the fitted logits' labels and the served logits."""
    from tests.helpers import load_split
    _, val, val_labels = load_split("cifar10_resnet50_cross_entropy", "val")
    _, test, _ = load_split("cifar10_resnet50_cross_entropy", "test")
    val, val_labels = val[:2000], val_labels[:2000]
    body = {"method": "temperature", "logits": val.tolist(), "labels": val_labels.tolist()}
    assert client.post(f"/v1/calibrators/{SHIFT}/versions", json=body).status_code == 201
    assert client.post(f"/v1/calibrators/{SHIFT}/observations",
                       json={"logits": val.tolist(), "labels": val_labels.tolist()}).status_code == 201
    assert client.put(f"/v1/calibrators/{SHIFT}/logging", json={"sample_rate": 1.0}).status_code == 200
    served, at = [], 0
    for n in logged_parts:
        part = test[at:at + n]
        assert client.post(f"/v1/calibrators/{SHIFT}/calibrate", json={"logits": part.tolist()}).status_code == 200
        client.app.state.service.prediction_log.flush()  # one chunk per part
        served.append(part)
        at += n
    return val, val_labels, np.concatenate(served)


def test_label_shift_reads_exactly_the_newest_rows_asked_for(client):
    """Two logged chunks of 1000 and 2000 rows: ``last=1500`` estimates from exactly the newest
    1500 (EM on them equals the core's on the same rows), ``last=2500`` from the newest 2500
    across both chunks; main read whole chunks (2000 and 3000 rows)."""
    from calibration.label_shift import em_priors
    val, val_labels, served = _shift_setup(client, [1000, 2000])
    fitted = cal.create("temperature", {"input": "logits"}).fit(val, val_labels)
    source_priors = np.bincount(val_labels, minlength=10) / len(val_labels)
    for last in (1500, 2500):
        response = client.get(f"/v1/calibrators/{SHIFT}/label-shift", params={"last": last})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["n_predictions"] == last and body["n_source_rows"] == min(last, 2000)
        newest = fitted.predict_proba(served[-last:])
        source = np.bincount(val_labels[-last:], minlength=10) / min(last, 2000)
        np.testing.assert_allclose(body["source_priors"], source)
        np.testing.assert_allclose(body["em"]["priors"], em_priors(newest, source).priors, rtol=1e-9, atol=1e-12)
        if last < 2000:  # the labelled rows were cut to `last` too
            assert not np.allclose(source, source_priors)


def test_label_shift_over_the_read_budget_is_a_422_naming_the_setting_for_a_read_key(sqlite_url):
    """``last=5000000`` of 10 classes is 50 million entries, over the default budget of 2**23: a 422
    that names CALIBRATION_MAX_READ_ENTRIES and the most rows allowed, for a read-scoped key, with
    nothing read (main read every chunk: 450 MiB -> 6.5 GiB)."""
    from starlette.testclient import TestClient

    from app.access import keys
    from app.main import create_app
    from app.platform.migrate import upgrade
    from app.settings import Settings
    upgrade(sqlite_url)
    settings = Settings(database_url=sqlite_url, api_keys_enabled=True, api_key_cache_seconds=0,
                        log_writer="thread")  # as the client fixture's
    assert settings.max_read_entries == 1 << 23
    app = create_app(settings)
    write = keys.create_key(app.state.db, "writer", ["read", "write"])[1]
    read = keys.create_key(app.state.db, "reader", ["read"])[1]
    with TestClient(app, headers={"x-api-key": write}) as client:
        _shift_setup(client, [300])
        client.headers["x-api-key"] = read
        assert client.get(f"/v1/calibrators/{SHIFT}/label-shift", params={"last": 300}).status_code == 200
        response = client.get(f"/v1/calibrators/{SHIFT}/label-shift", params={"last": 5_000_000})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["detail"] == (
        "last=5000000 rows of 10 classes are 50000000 entries, over the limit of 8388608 entries one read may "
        "load (CALIBRATION_MAX_READ_ENTRIES); ask for at most 838860 rows")


BIG_ROWS, K = 100_000, 10  # one stored chunk of 100000 rows x 10 float64: 8 MB
ASKED = 1000  # rows a read asks for: 80 kB of inputs


def _peak(call) -> tuple[object, int]:
    """``call()``'s result and the peak of the memory it allocated (tracemalloc: Python objects
    and numpy's arrays, which report to it), after a first call that warms caches."""
    import tracemalloc
    call()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def big_chunks(client):
    """``SHIFT`` fitted on 10 classes, with one uploaded observation chunk and one logged chunk of
    BIG_ROWS rows each (written by the stores, as an upload and a flush write them)."""
    from app.observations import store as observation_store
    from app.prediction_log import store as prediction_log_store
    from app.registry import store
    rng = np.random.default_rng(34)
    labels = rng.integers(0, K, BIG_ROWS)
    logits = rng.normal(size=(BIG_ROWS, K)) + 2 * np.eye(K)[labels]
    fit = {"method": "temperature", "logits": logits[:500].tolist(), "labels": labels[:500].tolist()}
    for _ in range(2):  # versions 1 and 2, for an evaluation
        assert client.post(f"/v1/calibrators/{SHIFT}/versions", json=fit).status_code == 201
    with client.app.state.db.write() as session:
        calibrator_id = store.calibrator_row(session, SHIFT).id
        observation_store.append(session, calibrator_id, "upload", None, "logits", K, logits, labels)
        prediction_log_store.log_predictions(session, calibrator_id, 1, "logits", K, logits, [None] * BIG_ROWS)
    return client.app.state.service


# the bound: the rows asked for x 8 bytes an entry x K classes x a factor for the working copies
# (raw and calibrated probabilities of the logged and the labelled rows, the BCTS fit, EM, the
# bootstrap resamples) and 1 MB for what every call allocates whatever its size (SQLAlchemy, the
# calibrator); the chunk a whole-chunk read brings in is 8 MB
def _bound(rows: int) -> int:
    return rows * K * 8 * 20 + (1 << 20)


def test_label_shift_peak_memory_is_bounded_by_the_rows_asked_for(big_chunks):
    from app.monitoring import quality
    answer, peak = _peak(lambda: quality.label_shift(big_chunks, SHIFT, last=ASKED))
    assert answer["n_predictions"] == ASKED and answer["n_source_rows"] == ASKED
    print(f"label shift of {ASKED} rows: peak {peak} B, bound {_bound(ASKED)} B")
    assert peak < _bound(ASKED) < BIG_ROWS * K * 8


def test_quality_and_fits_read_only_the_rows_they_select(big_chunks):
    """A quality window of the newest 1000 rows, and a fit's arrays and an evaluation's selection
    of ``last=1000``, out of one 100000-row chunk: peak memory within the bound (main read the
    whole chunk's blob)."""
    from app.monitoring import quality
    from app.observations.schemas import ObservationQuery
    query = quality.QualityQuery(window=str(ASKED), windows=1, bootstrap=0)
    answer, peak = _peak(lambda: quality.quality(big_chunks, SHIFT, query))
    assert [w["n_rows"] for w in answer["windows"]] == [ASKED]
    print(f"quality of {ASKED} rows: peak {peak} B")
    assert peak < _bound(ASKED)
    index = big_chunks.observations.fit_index(SHIFT, ObservationQuery(last=ASKED).to_value())
    batch, peak = _peak(lambda: big_chunks.observations.load(None, index))
    assert batch.values.shape == (ASKED, K) and len(batch.labels) == ASKED
    print(f"a fit's {ASKED} rows: peak {peak} B")
    assert peak < _bound(ASKED)


def test_quality_and_evaluations_over_the_read_budget_are_413s_naming_the_setting(big_chunks):
    from app.monitoring import quality
    from app.platform.errors import TooLarge
    from app.promotion import evaluations
    from app.promotion.schemas import EvaluationRequest
    big_chunks.max_read_entries = ASKED * K
    assert quality.quality(big_chunks, SHIFT, quality.QualityQuery(window=str(ASKED), windows=1, bootstrap=0))
    with pytest.raises(TooLarge, match=r"over the limit of 10000 entries one read may load "
                                       r"\(CALIBRATION_MAX_READ_ENTRIES\)"):
        quality.quality(big_chunks, SHIFT, quality.QualityQuery(window=str(ASKED), windows=2, bootstrap=0))
    request = EvaluationRequest.model_validate({"challenger": 2, "champion": 1,
                                                "data": {"observations": {"last": ASKED + 1}}}).to_value()
    with pytest.raises(TooLarge, match=r"1001 rows of 10 classes, 10010 entries, over the limit of 10000 entries "
                                       r"one read may load \(CALIBRATION_MAX_READ_ENTRIES\)"):
        evaluations.evaluate(big_chunks, SHIFT, request)


def test_an_alarms_evaluation_reads_within_the_budget(big_chunks):
    """The label-free monitor's reference is the newest labelled rows (50000 by default): with a
    budget of 1000 rows x 10 classes it reads 1000 of the 100000-row upload, within the bound
    (main read the whole chunk)."""
    from app.monitoring import alarms as drift_alarms
    big_chunks.max_read_entries = ASKED * K

    def evaluate():
        with big_chunks.db.write() as session:  # each call starts the monitor afresh
            session.execute(text_("DELETE FROM drift_monitors"))
        return drift_alarms.evaluate(big_chunks, SHIFT)
    answer, peak = _peak(evaluate)
    (monitor,) = answer["monitors"]
    assert monitor["signal"] == "label_free" and monitor["reference"]["rows"] == ASKED
    print(f"alarms evaluation with a reference of {ASKED} rows: peak {peak} B")
    assert peak < _bound(ASKED)


def text_(statement: str):
    from sqlalchemy import text
    return text(statement)


def test_labels_read_only_the_logged_rows_they_label(client):
    """Labelling one logged prediction of a 100000-row logged chunk (one calibrate request of
    100000 rows is one chunk) reads that row, not the chunk's 8 MB: peak memory within the bound
    of one row (main read every chunk a label's id is in, whole)."""
    import tracemalloc

    from app.prediction_log import store as prediction_log_store
    from app.registry import store
    rng = np.random.default_rng(35)
    labels = rng.integers(0, K, BIG_ROWS)
    logits = rng.normal(size=(BIG_ROWS, K)) + 2 * np.eye(K)[labels]
    fit = {"method": "temperature", "logits": logits[:500].tolist(), "labels": labels[:500].tolist()}
    assert client.post(f"/v1/calibrators/{SHIFT}/versions", json=fit).status_code == 201
    with client.app.state.db.write() as session:
        calibrator_id = store.calibrator_row(session, SHIFT).id
        prediction_log_store.log_predictions(session, calibrator_id, 1, "logits", K, logits,
                                             ["r0", "r1"] + [None] * (BIG_ROWS - 3) + ["r2"])
    service = client.app.state.service
    assert service.observations.label(SHIFT, ["r0"], [int(labels[0])])["labelled"] == 1  # warms caches
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        answer = service.observations.label(SHIFT, ["r1", "r2"], [int(labels[1]), int(labels[-1])])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert answer["labelled"] == 2
    with client.app.state.db.read() as session:
        from app.observations import store as observation_store
        index = observation_store.chunk_index(session, calibrator_id, observation_store.Selection(source="feedback"))
        stored, stored_labels = observation_store.load(session, index)
    np.testing.assert_array_equal(stored, logits[[0, 1, -1]])
    np.testing.assert_array_equal(stored_labels, labels[[0, 1, -1]])
    print(f"labels of 2 rows of a {BIG_ROWS}-row chunk: peak {peak} B")
    assert peak < _bound(2) < BIG_ROWS * K * 8


def test_a_power_analysis_reads_its_rows_within_the_read_budget(sqlite_url, monkeypatch):
    """The power job samples from the newest CALIBRATION_POWER_ROWS (50000) labelled rows; like the
    label-free monitor's reference (the same rows), it reads at most CALIBRATION_MAX_READ_ENTRIES
    of them: with a budget of 200 rows x 10 classes, 200 of the 1000 stored (main: all 1000)."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.platform.migrate import upgrade
    from app.settings import Settings, get_settings
    upgrade(sqlite_url)
    monkeypatch.setenv("CALIBRATION_MAX_READ_ENTRIES", str(200 * K))  # jobs read the settings from the environment
    get_settings.cache_clear()
    rng = np.random.default_rng(7)
    labels = rng.integers(0, K, 1000)
    logits = rng.normal(size=(1000, K)) + 2 * np.eye(K)[labels]
    settings = Settings(database_url=sqlite_url, job_engine="embedded", max_read_entries=200 * K)
    with TestClient(create_app(settings)) as client:
        fit = {"method": "temperature", "logits": logits.tolist(), "labels": labels.tolist()}
        assert client.post("/v1/calibrators/m/versions", json=fit).status_code == 201
        upload = {"logits": logits.tolist(), "labels": labels.tolist()}
        assert client.post("/v1/calibrators/m/observations", json=upload).status_code == 201
        queued = client.post("/v1/calibrators/m/power", json={"shift": "temperature", "size": 1.5, "streams": 2,
                                                             "labels": 100})
        assert queued.status_code == 202, queued.text
        for _ in range(600):
            job = client.get(queued.headers["location"]).json()
            if job["status"] in ("succeeded", "failed"):
                break
            time.sleep(0.1)
        assert job["status"] == "succeeded", job
        assert job["result"]["rows"] == 200  # main: 1000
    get_settings.cache_clear()
