"""The requests each client method makes, written once for the sync and the async client.

Each operation is a generator: it yields ``Call`` (send this request, give me the response),
``Sleep`` (wait) and ``Report`` (tell the caller's progress callback) instructions (``_transport``)
and returns the method's value. ``Client`` runs them with ``httpx.Client`` and ``time.sleep``,
``AsyncClient`` with ``httpx.AsyncClient`` and ``asyncio.sleep``; retries, backoff and the
``Idempotency-Key`` live in those runners (``send_plan``), once.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx

from ._transport import Call, Operation, Report, Sleep
from .codec import INPUT_KINDS, NPY, NPZ, as_array, decode_npy, encode_npy, encode_npz
from .errors import JobFailed
from .models import Calibrator, Job, Version

if TYPE_CHECKING:  # numpy (and the arrays the client returns) load with the first array sent (codec)
    import numpy as np

# -- helpers -------------------------------------------------------------------------------


def _segment(value: str) -> str:
    return quote(str(value), safe="@")


def _path(ref: str, version: int | None, action: str) -> str:
    """``/v1/calibrators/{ref}/{action}`` or, pinned, ``/v1/calibrators/{name}/versions/{v}/{action}``."""
    if version is None:
        return f"/v1/calibrators/{_segment(ref)}/{action}"
    if "@" in ref:
        raise ValueError(f"pass a calibrator name with version=, not the alias reference {ref!r}")
    return f"/v1/calibrators/{_segment(ref)}/versions/{int(version)}/{action}"


def _kind(input: str) -> str:
    if input not in INPUT_KINDS:
        raise ValueError(f"input must be one of {', '.join(INPUT_KINDS)}, not {input!r}")
    return input


def _labelled(values, labels, input: str) -> dict[str, np.ndarray]:
    if values is None or labels is None:
        raise ValueError(f"{_kind(input)} and labels are both required")
    return {_kind(input): as_array(values, input), "labels": as_array(labels, "labels")}


def _query(**values) -> dict[str, str]:
    """Query parameters: JSON for dicts, ``true``/``false`` for booleans, ``None`` left out."""
    query = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, dict):
            query[key] = json.dumps(value, allow_nan=False)
        elif isinstance(value, bool):
            query[key] = "true" if value else "false"
        else:
            query[key] = str(value)
    return query


def _json_body(arrays: dict[str, np.ndarray], **fields) -> dict:
    body = {key: value.tolist() for key, value in arrays.items()}
    body.update({key: value for key, value in fields.items() if value is not None})
    return body


# -- operations ----------------------------------------------------------------------------


def fit(name, logits, labels, probabilities, scores, method, options, class_names, description, tags,
        tensor_names, wait, progress, poll) -> Operation:
    given = {kind: value for kind, value in (("logits", logits), ("probabilities", probabilities),
                                             ("scores", scores)) if value is not None}
    if len(given) != 1:
        raise ValueError("pass exactly one of logits, probabilities or scores"
                         + (f" (got {', '.join(given)})" if given else ""))
    (kind, values), = given.items()
    arrays = _labelled(values, labels, kind)
    path = f"/v1/calibrators/{_segment(name)}/versions"
    # as a job when the caller does not wait or follows the progress (the server reports it per step)
    headers = {"Prefer": "respond-async"} if not wait or progress is not None else {}
    if class_names is not None and any("," in str(n) for n in class_names):
        # the query form splits class_names at commas: names with one go as JSON
        body = _json_body(arrays, method=method, options=options, class_names=list(class_names),
                          description=description, tags=tags, tensor_names=tensor_names)
        call = Call("POST", path, json=body, headers=headers, ok=(201, 202))
    else:
        query = _query(method=method, options=options, description=description, tags=tags,
                       tensor_names=tensor_names,
                       class_names=",".join(map(str, class_names)) if class_names is not None else None)
        call = Call("POST", path, params=query, content=encode_npz(arrays), ok=(201, 202),
                    headers={"Content-Type": NPZ, **headers})
    return (yield from version_or_job((yield call), wait, progress, poll))


def version_or_job(response: httpx.Response, wait: bool, progress, poll: float) -> Operation:
    """A fit's answer: the stored version, or (202, a server that fits in the background) the job,
    followed to its version when ``wait``."""
    if response.status_code == 202:
        job = Job.from_dict(response.json())
        if not wait:
            return job
        job = yield from wait_for_job(job.id, progress, poll, None)
        return Version.from_dict(job.result)
    if progress is not None:
        yield Report(progress, 100.0)
    return Version.from_dict(response.json())


# the largest ``Prediction-Ids`` header a binary calibrate sends (half the service's default
# CALIBRATION_MAX_HEADER_BYTES of 64 KiB for the whole request head); longer ids go as JSON
MAX_ID_HEADER_BYTES = 32 * 1024


def _prediction_ids(ids, n: int) -> list[str] | None:
    """The caller's prediction ids as strings, one per row; the service refuses ids with commas
    (they would also split the header a binary call sends them in), so they are refused here."""
    if ids is None:
        return None
    ids = [i.decode() if isinstance(i, bytes) else str(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
    if len(ids) != n:
        raise ValueError(f"ids has {len(ids)} entries for {n} rows")
    if any("," in i for i in ids):
        raise ValueError("prediction ids cannot contain commas")
    return ids


def calibrate(ref, values, version, input, with_version, binary, ids=None, dtype=None) -> Operation:
    """One calibrate call. A binary answer comes in the batch's precision (float32 for float32 or
    float16 values, else float64) unless ``dtype`` (``float32``/``float64``) asks; a JSON answer
    is read as float64, or as ``dtype``. Prediction ids go in the JSON body, or with a binary body in the
    ``Prediction-Ids`` header (a JSON call when they are longer than ``MAX_ID_HEADER_BYTES`` or
    not what a header can carry as they are).
    The ids the service used come back as ``ids`` in JSON, or for a binary answer as the
    ``Prediction-Logged`` count with, for generated ids, the ``Prediction-Id-Prefix`` (row ``i``'s
    id is the prefix and ``i``); neither when the calibrator does not log."""
    import numpy as np

    from .arrays import Calibrated

    kind = _kind(input)
    array = as_array(values, kind)
    sent = _prediction_ids(ids, len(array))
    path = _path(ref, version, "calibrate")
    header = ",".join(sent) if sent is not None else None
    # a header carries printable ASCII, and its ends lose their spaces: other ids go as JSON, where
    # the service's check names what is wrong with them
    as_json = header is not None and (len(header) > MAX_ID_HEADER_BYTES or not header.isascii()
                                      or not header.isprintable() or header != header.strip())
    if with_version or not binary or as_json:
        body = _json_body({kind: array}, outputs=["probabilities"], ids=sent, dtype=dtype)
        answer = (yield Call("POST", path, json=body)).json()
        return Calibrated(np.asarray(answer["probabilities"], dtype=dtype or np.float64).reshape(len(array), -1),
                          answer.get("name"), answer.get("version"), answer.get("ids"), answer.get("logged"))
    headers = {"Content-Type": NPY, "Accept": NPY} | ({"Prediction-Ids": header} if header is not None else {})
    query = {"input": kind} | ({"dtype": dtype} if dtype is not None else {})
    response, body = yield Call("POST", path, params=query, content=encode_npy(array), headers=headers,
                                owned_body=True)
    served = response.headers.get("x-calibrator-version")  # the version that served the binary answer
    logged = response.headers.get("prediction-logged")  # only when the calibrator logs
    prefix = response.headers.get("prediction-id-prefix")  # only for generated ids
    used = None
    if logged is not None:
        used = sent if prefix is None else [f"{prefix}{i}" for i in range(len(array))]
    name = ref.partition("@")[0]
    return Calibrated(decode_npy(body, own=True), name,
                      int(served) if served else (int(version) if version is not None else None),
                      used, int(logged) if logged is not None else None)


def report(ref, values, labels, version, input, n_bins, bootstrap, confidence, seed, image) -> Operation:
    arrays = _labelled(values, labels, input)
    headers = {"Content-Type": NPZ}
    if image is not None:
        types = {"png": "image/png", "svg": "image/svg+xml"}
        if image not in types:
            raise ValueError(f"image must be 'png' or 'svg', not {image!r}")
        headers["Accept"] = types[image]
    query = _query(n_bins=n_bins, bootstrap=bootstrap, confidence=confidence, seed=seed)
    response = yield Call("POST", _path(ref, version, "report"), params=query, content=encode_npz(arrays),
                          headers=headers)
    return response.content if image is not None else response.json()


def metrics(values, labels, input, n_bins, bootstrap, confidence, seed) -> Operation:
    arrays = _labelled(values, labels, input)
    query = _query(n_bins=n_bins, bootstrap=bootstrap, confidence=confidence, seed=seed)
    response = yield Call("POST", "/v1/metrics", params=query, content=encode_npz(arrays),
                          headers={"Content-Type": NPZ})
    return response.json()


def compare(values, labels, input, methods, folds, seed, preserve_accuracy, wait, progress, poll) -> Operation:
    arrays = _labelled(values, labels, input)
    headers = {"Prefer": "respond-async"}
    if methods is None:
        query = _query(folds=folds, seed=seed, preserve_accuracy=preserve_accuracy)
        call = Call("POST", "/v1/compare", params=query, content=encode_npz(arrays), ok=(200, 202),
                    headers={"Content-Type": NPZ, **headers})
    else:  # the .npz form cannot carry the list of candidates (a query parameter is one string)
        body = _json_body(arrays, methods=list(methods), folds=folds, seed=seed,
                          preserve_accuracy=preserve_accuracy)
        call = Call("POST", "/v1/compare", json=body, ok=(200, 202), headers=headers)
    response = yield call
    if response.status_code == 200:  # answered in the request
        if progress is not None:
            yield Report(progress, 100.0)
        return response.json()
    job = Job.from_dict(response.json())
    if not wait:
        return job
    job = yield from wait_for_job(job.id, progress, poll, None)
    return job.result


def get_job(job_id: str) -> Operation:
    return Job.from_dict((yield Call("GET", f"/v1/jobs/{_segment(job_id)}")).json())


def wait_for_job(job_id: str, progress, poll: float, timeout: float | None) -> Operation:
    """Poll until the job is done; ``progress(percent)`` on each new percent (increasing, ending
    at 100 on success). A failed job raises ``JobFailed``; past ``timeout`` seconds,
    ``TimeoutError``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    told = None
    while True:
        job = yield from get_job(job_id)
        percent = 100.0 if job.status == "succeeded" else float(job.percent or 0.0)
        if progress is not None and (told is None or percent > told):
            told = percent
            yield Report(progress, percent)
        if job.status in ("failed", "cancelled"):
            raise JobFailed(job, instance=job.location)
        if job.done:
            return job
        if deadline is not None and time.monotonic() + poll > deadline:
            raise TimeoutError(f"job {job_id} still running after {timeout} s ({job.percent:.0f}% done)")
        yield Sleep(poll)


def _pages(path: str, key: str, page_size: int) -> Operation:
    items, token = [], None
    while True:
        answer = (yield Call("GET", path, params=_query(page_size=page_size, page_token=token))).json()
        items.extend(answer[key])
        token = answer.get("next_page_token")
        if not token:
            return items


def versions(name: str) -> Operation:
    return [Version.from_dict(v) for v in (yield from _pages(f"/v1/calibrators/{_segment(name)}/versions",
                                                             "versions", 1000))]


def version(name: str, number: int) -> Operation:
    response = yield Call("GET", f"/v1/calibrators/{_segment(name)}/versions/{int(number)}")
    return Version.from_dict(response.json())


def calibrators() -> Operation:
    return [Calibrator.from_dict(c) for c in (yield from _pages("/v1/calibrators", "calibrators", 1000))]


def calibrator(name: str) -> Operation:
    return Calibrator.from_dict((yield Call("GET", f"/v1/calibrators/{_segment(name)}")).json())


def set_alias(name: str, alias: str, number: int) -> Operation:
    response = yield Call("PUT", f"/v1/calibrators/{_segment(name)}/aliases/{_segment(alias)}",
                          json={"version": int(number)})
    return response.json()


def delete(path: str) -> Operation:
    yield Call("DELETE", path, ok=(204,))


def methods() -> Operation:
    return (yield Call("GET", "/v1/methods")).json()["methods"]


def ready() -> Operation:
    return (yield Call("GET", "/readyz", ok=(200, 503))).json()
