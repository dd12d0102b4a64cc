"""CALIBRATION_DEVICE: calibrate, report and /v2 inference run on a torch device and answer as
the numpy service does; parameters are stored the same whatever the device."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from starlette.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.helpers import load_split, require

FITS = [("temperature", {}), ("dirichlet", {"off_diagonal_l2": 1e-3, "bias_l2": 1e-3}),
        ("isotonic_one_vs_all", {}), ("ensemble_temperature", {})]


def test_a_torch_device_serves_what_numpy_serves(database_url):
    require("torch")
    _, x_val, y_val = load_split("cifar10_resnet50_cross_entropy", "val")
    _, x_test, y_test = load_split("cifar10_resnet50_cross_entropy", "test")
    x_test, y_test = x_test[:500], y_test[:500]
    with TestClient(create_app(Settings(database_url=database_url))) as host, \
            TestClient(create_app(Settings(database_url=database_url, device="torch-cpu"))) as device:
        assert device.app.state.service.device.target.type == "cpu"
        for method, options in FITS:
            name = method.replace("_", "-")
            body = {"method": method, "options": options, "logits": x_val.tolist(), "labels": y_val.tolist()}
            assert host.post(f"/v1/calibrators/{name}/versions", json=body).status_code == 201
            batch = {"logits": x_test.tolist(), "outputs": ["probabilities", "predicted_class", "confidence"]}
            served = [client.post(f"/v1/calibrators/{name}/calibrate", json=batch).json() for client in (host, device)]
            atol = 1e-12  # isotonic maps read numpy's softmax of the logits on every device (map_scores)
            np.testing.assert_allclose(served[1]["probabilities"], served[0]["probabilities"], rtol=0, atol=atol)
            assert served[1]["predicted_class"] == served[0]["predicted_class"]
            labelled = {"logits": x_test.tolist(), "labels": y_test.tolist()}
            reports = [client.post(f"/v1/calibrators/{name}/report", json=labelled).json() for client in (host, device)]
            for metric, value in reports[0]["after"]["metrics"].items():
                assert reports[1]["after"]["metrics"][metric] == pytest.approx(value, rel=1e-10, abs=1e-12), metric
            infer = {"inputs": [{"name": "logits", "shape": [3, 10], "datatype": "FP64",
                                 "data": x_test[:3].astype(np.float64).ravel().tolist()}]}
            outputs = [client.post(f"/v2/models/{name}/infer", json=infer).json()["outputs"][0]["data"]
                       for client in (host, device)]
            np.testing.assert_allclose(outputs[1], outputs[0], rtol=0, atol=atol)


def test_an_unusable_device_stops_the_start_with_a_clear_error():
    with pytest.raises(ValidationError, match="device"):
        Settings(device="gpu")
    torch = require("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(ValueError, match="CALIBRATION_DEVICE=cuda, but torch sees no CUDA device"):
        create_app(Settings(database_url="sqlite://", device="cuda"))
