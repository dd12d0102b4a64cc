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
from app.costs import estimated_fit_seconds, fitted_parameters, isotonic_blocks, solver_entries
from tests.service.live import LiveServer
from tests.service.test_hostile_input import zip_bomb

JSON_FIT = {"method": "temperature", "logits": [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [-0.5, 0.2, 2.2], [1.0, 1.1, 0.9]],
            "labels": [0, 1, 2, 0]}


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
