"""``app.service`` on domain values (references, decoded batches) against a real database, no
HTTP: what it stores and serves equals the core's own result, and its errors are domain errors."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

import calibration as cal
from app.comparisons.service import Comparisons
from app.comparisons.values import CompareSpec
from app.platform.db import Database
from app.platform.errors import Conflict, InvalidInput, NotFound
from app.registry import integrity, store
from app.registry.names import Reference
from app.registry.service import CalibrationService
from app.registry.serving import CalibrateSpec, EvaluationSpec, FitSpec
from app.wire.batches import ArrayBatch
from tests.helpers import load_split

KIND, X, Y = load_split("cifar10_resnet50_cross_entropy", "val")
X, Y = X[:600], Y[:600]


@pytest.fixture
def service(database_url):
    database = Database(database_url)
    yield CalibrationService(database, cache_size=8, max_body_bytes=1 << 24)
    database.dispose()


def fit(service, name="demo", method="temperature", **options):
    return service.fit(name, ArrayBatch(FitSpec(method=method, options=options), KIND, X, Y))


def test_a_fit_stores_and_serves_what_the_core_fits(service):
    expected = cal.create("ensemble_temperature", {"input": KIND}).fit(X, Y)
    view = fit(service, method="ensemble_temperature")
    assert (view["name"], view["version"], view["n_samples"], view["n_classes"]) == ("demo", 1, 600, 10)
    assert view["parameters"] == cal.json_safe(expected.summary())
    served = service.calibrate(service.serving(Reference("demo")), ArrayBatch(CalibrateSpec(), KIND, X[:50], None))
    np.testing.assert_array_equal(served.probabilities, expected.predict_proba(X[:50]))
    np.testing.assert_array_equal(served.predicted_class(), cal.predicted_class(served.probabilities, X[:50]))
    assert (served.name, served.version) == ("demo", 1)


def test_references_resolve_to_the_latest_the_alias_or_the_pinned_version(service):
    fit(service)
    fit(service, objective="brier")
    assert service.serving(Reference("demo")).version == 2
    service.set_alias("demo", "production", 1)
    assert service.serving(Reference.parse("demo@production")).version == 1
    assert service.serving(Reference.pinned("demo", 2)).calibrator.options["objective"] == "brier"
    with pytest.raises(Conflict, match="target of alias"):
        service.delete_version("demo", 1)
    service.delete_version("demo", 2)
    with pytest.raises(NotFound, match="has no version 2"):
        service.serving(Reference.pinned("demo", 2))


def test_wrong_input_is_invalid_input_naming_it(service):
    fit(service)
    loaded = service.serving(Reference("demo"))
    with pytest.raises(InvalidInput, match="was fitted on logits; send logits, not probabilities"):
        service.calibrate(loaded, ArrayBatch(CalibrateSpec(), "probabilities", cal.softmax(X[:5]), None))
    with pytest.raises(InvalidInput, match="labels must be in"):
        service.metrics(ArrayBatch(EvaluationSpec(), "logits", X[:5], np.array([0, 1, 2, 3, 10])))
    with pytest.raises(InvalidInput, match="at least 4 samples"):
        Comparisons(service).compare(ArrayBatch(CompareSpec(folds=2, methods=["temperature"]), "logits",
                                                X[:3], Y[:3]))
    with pytest.raises(NotFound, match="no calibrator named 'other'"):
        service.serving(Reference("other"))


def test_a_report_is_the_core_s_metrics_before_and_after(service):
    fit(service)
    loaded = service.serving(Reference("demo"))
    report = service.report(loaded, ArrayBatch(EvaluationSpec(n_bins=10), KIND, X, Y))
    after = loaded.calibrator.predict_proba(X)
    assert report["after"]["metrics"]["ece"] == cal.ece(after, Y, n_bins=10)
    assert report["before"]["metrics"]["nll"] == cal.nll(cal.softmax(X.astype(np.float64)), Y)


def test_v2_metadata_lists_the_model_s_versions(service):
    fit(service)
    fit(service)
    metadata = service.model_metadata(Reference("demo"))
    assert metadata == {"name": "demo", "versions": [1, 2], "method": "temperature", "input_kind": "logits",
                        "n_classes": 10, "tensor_names": None}
    assert service.model_metadata(Reference.pinned("demo", 1))["versions"] == [1]


def test_stored_parameters_are_the_calibrator_s_canonical_json(service):
    view = fit(service)
    with service.db.read() as session:
        row = store.get_version(session, "demo", view["version"])
    expected = cal.create("temperature", {"input": KIND}).fit(X, Y).to_dict()
    stored = orjson.loads(row.params_json)
    assert stored["params"] == expected["params"]
    assert row.checksum == integrity.digest(integrity.record_of("demo", row), None)
    assert row.checksum.startswith("sha256-v2:")
