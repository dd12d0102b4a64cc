"""The client's operations of the online loop (written once for both clients, as in
``_protocol``): append observations, turn the prediction log on, post labels of logged
predictions, summarise the observations, fit on them; quality, drift alarms, the label-shift
estimate, evaluations, alias moves and refit policies."""

from __future__ import annotations

from collections.abc import Sequence

from ._protocol import _labelled, _query, _segment, version_or_job, wait_for_job
from ._transport import Call, Operation
from .codec import NPZ, encode_npz
from .models import Job


def _base(name: str) -> str:
    return f"/v1/calibrators/{_segment(name)}"


def observe(name: str, values, labels, input: str, observed_at: str | None) -> Operation:
    """Append a labelled batch as ``.npz`` (``observed_at``: ISO 8601 with an offset, to back-fill)."""
    response = yield Call("POST", f"{_base(name)}/observations", params=_query(observed_at=observed_at),
                          content=encode_npz(_labelled(values, labels, input)), headers={"Content-Type": NPZ},
                          ok=(201,))
    return response.json()


def observations(name: str) -> Operation:
    return (yield Call("GET", f"{_base(name)}/observations")).json()


def set_logging(name: str, sample_rate: float) -> Operation:
    return (yield Call("PUT", f"{_base(name)}/logging", json={"sample_rate": sample_rate})).json()


def label(name: str, ids: Sequence[str], labels: Sequence[int]) -> Operation:
    body = {"ids": [str(i) for i in ids], "labels": [int(y) for y in labels]}
    return (yield Call("POST", f"{_base(name)}/labels", json=body)).json()


def fit_stored(name: str, method: str, options: dict | None, observations: dict, wait: bool, progress,
               poll: float) -> Operation:
    """Fit on ``name``'s stored observations (``observations``: last, since, until, source, version)."""
    headers = {"Prefer": "respond-async"} if not wait or progress is not None else {}
    body = {"method": method, "options": options or {}, "data": {"observations": observations}}
    response = yield Call("POST", f"{_base(name)}/versions", json=body, headers=headers, ok=(201, 202))
    return (yield from version_or_job(response, wait, progress, poll))


# -- quality, alarms, evaluations and alias moves (#20, #21) -------------------------------------

def get(path: str, params: dict | None = None) -> Operation:
    return (yield Call("GET", path, params=params)).json()


def post(path: str, body: dict | None = None, ok: tuple[int, ...] = (200,)) -> Operation:
    return (yield Call("POST", path, json=body, ok=ok)).json()


def put(path: str, body: dict) -> Operation:
    return (yield Call("PUT", path, json=body)).json()


def quality(name: str, window: str, version: int | None, windows: int, bootstrap: int) -> Operation:
    return (yield from get(f"{_base(name)}/quality", _query(window=window, version=version, windows=windows,
                                                              bootstrap=bootstrap)))


def evaluate(name: str, challenger, champion, alpha: float, observations: dict | None,
             options: dict | None = None) -> Operation:
    """``options``: more fields of the evaluation body (those ``None`` are left to the service)."""
    body = {"challenger": challenger, "alpha": alpha} | {k: v for k, v in (options or {}).items() if v is not None}
    if champion is not None:
        body["champion"] = champion
    if observations is not None:
        body["data"] = {"observations": observations}
    return (yield from post(f"{_base(name)}/evaluations", body, ok=(201,)))


def move_alias(name: str, alias: str, version: int, evaluation: str | None) -> Operation:
    body = {"version": int(version)} | ({"evaluation": evaluation} if evaluation else {})
    return (yield from put(f"{_base(name)}/aliases/{_segment(alias)}", body))


# -- the online steps' knobs: alarms, label shift, refit policies ---------------------------------

def alarms(name: str, drift: float | None) -> Operation:
    return (yield from get(f"{_base(name)}/alarms", _query(drift=drift)))


def evaluate_alarms(name: str, alpha: float | None, tolerance: float | None, half_life: float | None,
                    class_tolerance: float | None) -> Operation:
    """Feed the drift monitors; options left ``None`` take the service's defaults."""
    query = _query(alpha=alpha, tolerance=tolerance, half_life=half_life, class_tolerance=class_tolerance)
    return (yield Call("POST", f"{_base(name)}/alarms/evaluate", params=query)).json()


def label_shift(name: str, version: int | None, last: int | None, alpha: float | None) -> Operation:
    return (yield from get(f"{_base(name)}/label-shift", _query(version=version, last=last, alpha=alpha)))


def run_policy(name: str, force: bool, wait: bool, progress, poll: float) -> Operation:
    """Check the refit policy: its answer when no trigger fired (``triggered`` false), else the
    refit job, followed to its result when ``wait``."""
    response = yield Call("POST", f"{_base(name)}/policy/run", params=_query(force=force or None), ok=(200, 202))
    if response.status_code == 200:
        return response.json()
    job = Job.from_dict(response.json())
    if not wait:
        return job
    return (yield from wait_for_job(job.id, progress, poll, None)).result


def power(name: str, fields: dict, wait: bool, progress, poll: float) -> Operation:
    """Queue the drift monitor's power analysis (a ``power`` job); its result when ``wait``."""
    job = Job.from_dict((yield Call("POST", f"{_base(name)}/power", json=fields, ok=(202,))).json())
    if not wait:
        return job
    return (yield from wait_for_job(job.id, progress, poll, None)).result
