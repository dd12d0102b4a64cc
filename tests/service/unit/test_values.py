"""Domain values (``app.platform.values`` and each domain's ``values``): a request model turns into the
frozen dataclass its service takes, a stored request reads back into the same value, and a damaged
one is a ``ValueError`` naming the field."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from app.platform.values import entries_of, json_time

OFFSETS = st.one_of(st.none(), st.integers(-86_399, 86_399).map(lambda s: timezone(timedelta(seconds=s))))


@given(st.datetimes(), OFFSETS)
def test_a_time_is_written_as_pydantic_writes_it_in_json(moment, zone):
    moment = moment.replace(tzinfo=zone)
    assert json_time(moment) == TypeAdapter(datetime).dump_python(moment, mode="json")


@dataclass(frozen=True)
class Sample:
    name: str
    count: int = 1
    share: float = 0.5
    flag: bool = False
    kind: Literal["a", "b"] = "a"
    pair: tuple[int, int] | None = None
    items: list[str | dict[str, Any]] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    at: datetime | None = None


def test_entries_read_back_a_stored_value_with_its_types():
    stored = {"name": "x", "count": 3, "share": 2, "flag": True, "kind": "b", "pair": [1, 2],
              "items": ["t", {"method": "platt"}], "tags": {"k": "v"}, "at": "2026-11-23T01:02:03.5+01:00"}
    value = Sample(**entries_of(Sample, stored, "a sample"))
    assert value == Sample("x", 3, 2.0, True, "b", (1, 2), ["t", {"method": "platt"}], {"k": "v"},
                           datetime(2026, 11, 23, 0, 2, 3, 500_000, tzinfo=UTC))
    assert isinstance(value.share, float) and value.at.utcoffset() == timedelta(hours=1)
    assert Sample(**entries_of(Sample, {"name": "y"}, "a sample")) == Sample("y")


@pytest.mark.parametrize(("stored", "message"), [
    ([], "a sample: [] is not an object"),
    ({"name": "x", "colour": 1}, "a sample: unknown field(s) colour"),
    ({"count": 1}, "a sample: field 'name' is missing"),
    ({"name": 1}, "a sample: name: 1 is not str"),
    ({"name": "x", "count": "3"}, "a sample: count: '3' is not int"),
    ({"name": "x", "count": True}, "a sample: count: True is not int"),
    ({"name": "x", "share": None}, "a sample: share: None is not float"),
    ({"name": "x", "flag": 1}, "a sample: flag: 1 is not bool"),
    ({"name": "x", "kind": "c"}, "a sample: kind: 'c' is not one of 'a', 'b'"),
    ({"name": "x", "pair": [1, 2, 3]}, "a sample: pair: [1, 2, 3] is not a list of 2"),
    ({"name": "x", "items": [3]}, "a sample: items[0]: 3 is not str or dict"),
    ({"name": "x", "tags": {"k": 1}}, "a sample: tags.k: 1 is not str"),
    ({"name": "x", "at": "2026-11-23T01:02:03"}, "a sample: at needs a UTC offset"),
    ({"name": "x", "at": "yesterday"}, "a sample: at: 'yesterday' is not a time (ISO 8601 text)"),
])
def test_a_damaged_stored_value_is_refused_naming_its_field(stored, message):
    with pytest.raises(ValueError) as caught:
        entries_of(Sample, stored, "a sample")
    assert str(caught.value).startswith(message), str(caught.value)


QUERIES = [{}, {"last": 100}, {"since": "2026-11-23T00:00:00Z", "source": "feedback", "version": 2},
           {"since": "2026-11-23T00:00:00.25+01:00", "until": "2026-11-24T12:00:00-05:30", "source": "upload"}]


@pytest.mark.parametrize("given_query", QUERIES)
def test_an_observation_query_turns_into_a_selection_that_writes_and_reads_back_the_same_json(given_query):
    from app.observations.schemas import ObservationQuery
    from app.observations.values import ObservationSelection

    query = ObservationQuery.model_validate(given_query)
    selection = query.to_value()
    assert selection.to_dict() == query.model_dump(mode="json")
    assert selection.to_dict(exclude_none=True) == query.model_dump(mode="json", exclude_none=True)
    assert repr(selection.given()) == repr(query.model_dump(exclude_none=True))
    assert ObservationSelection.from_dict(selection.to_dict()) == selection
    assert ObservationSelection() == ObservationQuery().to_value()


def test_a_selection_needs_times_with_an_offset():
    from app.observations.values import ObservationSelection

    with pytest.raises(ValueError, match="since needs a UTC offset"):
        ObservationSelection(since=datetime(2026, 11, 23))
    with pytest.raises(ValueError, match="a stored selection: source: 'uploads' is not one of 'upload', 'feedback'"):
        ObservationSelection.from_dict({"source": "uploads"})


def test_the_registry_request_models_turn_into_values_with_the_same_defaults():
    from app.registry.schemas import CalibrateFields, EvaluationFields, FitFields
    from app.registry.serving import CalibrateSpec, EvaluationSpec, FitSpec

    assert FitFields(method="platt").to_value() == FitSpec(method="platt")
    assert CalibrateFields().to_value() == CalibrateSpec()
    assert EvaluationFields().to_value() == EvaluationSpec()
    assert EvaluationFields(n_bins=10, bootstrap=5, seed=3).to_value() == EvaluationSpec(n_bins=10, bootstrap=5, seed=3)


@pytest.mark.parametrize("given_fit", [
    {"method": "temperature"},
    {"method": "auto", "options": {"candidates": ["platt", {"method": "vector"}]}, "class_names": ["a", "b"],
     "description": "d", "tags": {"team": "x"}, "tensor_names": {"inputs": ["x"]}, "input_check": False},
    {"method": "temperature", "data": {"observations": {"last": 500, "since": "2026-11-23T00:00:00Z"}}},
])
def test_a_fit_job_keeps_the_json_the_request_model_wrote_and_reads_back_the_same_value(given_fit):
    from app.registry.schemas import FitFields
    from app.registry.serving import FitSpec

    fields = FitFields.model_validate(given_fit)
    value = fields.to_value()
    assert value.to_dict() == fields.model_dump(mode="json")
    assert FitSpec.from_dict(value.to_dict()) == value
    assert value.tensor_names == (fields.tensor_names.model_dump() if fields.tensor_names else None)


@pytest.mark.parametrize(("stored", "message"), [
    ({"options": {}}, "a stored fit request: field 'method' is missing"),
    ({"method": 3}, "a stored fit request: method: 3 is not str"),
    ({"method": "platt", "tags": {"a": 1}}, "a stored fit request: tags.a: 1 is not str"),
    ({"method": "platt", "data": {"last": 5}}, "a stored fit request: data: {'last': 5} is not {'observations'"),
    ({"method": "platt", "data": {"observations": {"last": "5"}}},
     "a stored fit request: data.observations: last: '5' is not int"),
])
def test_a_damaged_fit_request_is_refused_naming_its_field(stored, message):
    from app.registry.serving import FitSpec

    with pytest.raises(ValueError) as caught:
        FitSpec.from_dict(stored)
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize("given_comparison", [
    {}, {"methods": ["temperature", {"method": "platt", "options": {}, "name": "p"}], "folds": 3, "seed": 7,
         "preserve_accuracy": True, "input_check": False}])
def test_a_comparison_job_keeps_the_json_the_request_model_wrote_and_reads_back_the_same_value(given_comparison):
    from app.comparisons.schemas import CompareFields
    from app.comparisons.values import CompareSpec

    fields = CompareFields.model_validate(given_comparison)
    value = fields.to_value()
    assert value.to_dict() == fields.model_dump(mode="json")
    assert CompareSpec.from_dict(value.to_dict()) == value
    assert CompareFields().to_value() == CompareSpec()
    with pytest.raises(ValueError, match="a stored comparison request: folds: '5' is not int"):
        CompareSpec.from_dict({**value.to_dict(), "folds": "5"})


def test_a_set_predictor_request_turns_into_its_value():
    from app.conformal.schemas import SetPredictorFields
    from app.conformal.values import SetPredictorSpec
    from app.observations.values import ObservationSelection

    assert SetPredictorFields(coverage=[0.9]).to_value() == SetPredictorSpec(coverage=[0.9])
    fields = SetPredictorFields.model_validate({"coverage": "0.8,0.9", "score": "raps", "k_reg": 2, "lam": 0.5,
                                                "adaptive": "aci", "data": {"observations": {"source": "upload"}}})
    assert fields.to_value() == SetPredictorSpec(coverage=[0.8, 0.9], score="raps", k_reg=2, lam=0.5, adaptive="aci",
                                                 data=ObservationSelection(source="upload"))


@pytest.mark.parametrize("given_policy", [
    {"every_labels": 5000}, {"every_labels": 5000, "on_alarm": True, "every_seconds": 3600, "last": 50000,
                             "holdout": 0.25, "method": "auto", "options": {"candidates": ["platt"]},
                             "alias": "production", "promote": True, "alpha": 0.1}])
def test_a_refit_policy_is_stored_as_the_json_the_request_model_wrote_and_read_back(given_policy):
    from app.promotion.schemas import RefitPolicy
    from app.promotion.values import PolicySpec

    policy = RefitPolicy.model_validate(given_policy)
    value = policy.to_value()
    assert value.to_dict() == policy.model_dump(mode="json")
    assert PolicySpec.from_dict(value.to_dict()) == value
    assert RefitPolicy().to_value() == PolicySpec()
    with pytest.raises(ValueError, match="a stored refit policy: unknown field"):
        PolicySpec.from_dict({**value.to_dict(), "every_minutes": 5})


def test_an_evaluation_request_turns_into_its_value():
    from app.observations.values import ObservationSelection
    from app.promotion.schemas import EvaluationRequest
    from app.promotion.values import ChallengeSpec

    assert EvaluationRequest(challenger=2).to_value() == ChallengeSpec(challenger=2)
    request = EvaluationRequest.model_validate({"challenger": "shadow", "champion": 1, "alpha": 0.1,
                                                "decide_on": "brier", "data": {"observations": {"last": 10}}})
    assert request.to_value() == ChallengeSpec(challenger="shadow", champion=1, alpha=0.1, decide_on="brier",
                                               data=ObservationSelection(last=10))


@pytest.mark.parametrize("given_power", [
    {"shift": "temperature", "size": 2}, {"shift": "swap", "size": 1, "swap_classes": [3, 5], "signal": "label_free",
                                          "version": 2, "streams": 10, "labels": 500, "checkpoints": [100, 200],
                                          "alpha": 0.05, "half_life": 50, "seed": 4}])
def test_a_power_job_keeps_the_json_the_request_model_wrote_and_reads_back_the_same_value(given_power):
    from app.monitoring.power import PowerSpec
    from app.monitoring.power_schemas import PowerRequest

    request = PowerRequest.model_validate(given_power)
    value = request.to_value()
    assert value.to_dict() == request.model_dump(mode="json")
    assert PowerSpec.from_dict(value.to_dict()) == value
    assert PowerRequest(shift="dirichlet", size=1.0).to_value() == PowerSpec(shift="dirichlet", size=1.0)
    with pytest.raises(ValueError, match=r"a stored power request: shift: 'warp' is not one of 'temperature'"):
        PowerSpec.from_dict({**value.to_dict(), "shift": "warp"})
