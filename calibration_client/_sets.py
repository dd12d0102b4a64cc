"""The client's operations of prediction sets (written once for both clients, as in ``_protocol``):
fit a set predictor of a version, list, get and delete them, and calibrate with the output ``set``."""

from __future__ import annotations

from ._protocol import (
    _json_body,
    _kind,
    _labelled,
    _path,
    _prediction_ids,
    _query,
    _segment,
)
from ._transport import Call, Operation
from .codec import NPY, NPZ, as_array, decode_npy, encode_npy, encode_npz


def calibrate_sets(ref, values, version, input, outputs, coverage, set_predictor, binary, ids=None) -> Operation:
    """A calibrate call whose ``outputs`` include ``set``: with ``set`` alone and ``binary``, the
    batch travels as ``.npy`` and the answer is the service's ``(n, k)`` uint8 mask (the set
    predictor named by ``X-Set-Predictor``); else one JSON call whose ``set`` lists (and
    probabilities, when asked) make the ``PredictionSets``."""
    import numpy as np

    from .arrays import PredictionSets

    outputs = list(outputs)
    if "set" not in outputs or coverage is None:
        raise ValueError("prediction sets need outputs with 'set' and a coverage level (e.g. coverage=0.9)")
    kind = _kind(input)
    array = as_array(values, kind)
    sent = _prediction_ids(ids, len(array))
    path = _path(ref, version, "calibrate")
    name = ref.partition("@")[0]
    if outputs == ["set"] and binary and sent is None:
        query = {"input": kind, "outputs": "set", "coverage": repr(float(coverage))} | (
            {"set_predictor": str(int(set_predictor))} if set_predictor is not None else {})
        response = yield Call("POST", path, params=query, content=encode_npy(array),
                              headers={"Content-Type": NPY, "Accept": NPY})
        served = response.headers.get("x-calibrator-version")
        chosen = response.headers.get("x-set-predictor")
        logged = response.headers.get("prediction-logged")
        prefix = response.headers.get("prediction-id-prefix")
        used = [f"{prefix}{i}" for i in range(len(array))] if logged is not None and prefix is not None else None
        return PredictionSets(decode_npy(response.content).astype(bool), name,
                              int(served) if served else version, int(chosen) if chosen else set_predictor,
                              float(coverage), None, used, int(logged) if logged is not None else None)
    body = _json_body({kind: array}, outputs=outputs, coverage=float(coverage), set_predictor=set_predictor,
                      ids=sent)
    answer = (yield Call("POST", path, json=body)).json()
    k = None
    if "probabilities" in answer:
        probabilities = np.asarray(answer["probabilities"], dtype=np.float64).reshape(len(array), -1)
        k = probabilities.shape[1]
    else:
        probabilities = None
        k = yield from _n_classes(answer["name"], answer["version"])
    mask = np.zeros((len(array), k), dtype=bool)
    for row, classes in enumerate(answer["set"]):
        mask[row, classes] = True
    return PredictionSets(mask, answer.get("name"), answer.get("version"), answer.get("set_predictor"),
                          answer.get("coverage"), probabilities, answer.get("ids"), answer.get("logged"))


def _n_classes(name: str, number: int) -> Operation:
    return (yield Call("GET", f"/v1/calibrators/{_segment(name)}/versions/{int(number)}")).json()["n_classes"]


def fit_set_predictor(name, number, values, labels, input, coverage, score, class_conditional, k_reg, lam,
                      randomized, seed, observations, adaptive=None, adaptive_gamma=None) -> Operation:
    """Fit a set predictor of ``name``'s version ``number``: held-out rows as an ``.npz`` body (the
    fields as query parameters), or with ``observations`` (a query of the stored observations) a
    JSON body."""
    path = f"/v1/calibrators/{_segment(name)}/versions/{int(number)}/set-predictors"
    levels = [float(c) for c in ([coverage] if isinstance(coverage, int | float) else coverage)]
    fields = {"score": score, "class_conditional": class_conditional, "k_reg": k_reg, "lam": lam,
              "randomized": randomized, "seed": seed}
    if adaptive is not None:
        fields["adaptive"] = adaptive
    if adaptive_gamma is not None:
        fields["adaptive_gamma"] = adaptive_gamma
    if observations is not None:
        if values is not None or labels is not None:
            raise ValueError("pass held-out rows or observations, not both")
        call = Call("POST", path, json={**fields, "coverage": levels, "data": {"observations": observations}},
                    ok=(201,))
    else:
        arrays = _labelled(values, labels, input)
        query = _query(**fields) | {"coverage": ",".join(repr(c) for c in levels)}
        call = Call("POST", path, params=query, content=encode_npz(arrays), headers={"Content-Type": NPZ},
                    ok=(201,))
    return (yield call).json()


def set_predictors(name, number) -> Operation:
    path = f"/v1/calibrators/{_segment(name)}/versions/{int(number)}/set-predictors"
    return (yield Call("GET", path)).json()["set_predictors"]


def set_predictor(name, number, predictor) -> Operation:
    path = f"/v1/calibrators/{_segment(name)}/versions/{int(number)}/set-predictors/{int(predictor)}"
    return (yield Call("GET", path)).json()
