"""One small reference data set (``LOGITS``, ``LABELS``: 400 rows, 4 classes) and the requests the
in-process API tests build on it: ``fit`` (a version through ``POST /v1/calibrators/{name}/versions``,
asserted created) and ``npy`` (an array as a ``.npy`` body)."""

from __future__ import annotations

import io

import numpy as np

from tests.helpers import make_reference_input

LOGITS, LABELS = make_reference_input(n=400, k=4, seed=21)


def fit(client, name="demo", method="temperature", options=None, **extra):
    body = {"method": method, "logits": LOGITS.tolist(), "labels": LABELS.tolist(), **extra}
    if options is not None:
        body["options"] = options
    response = client.post(f"/v1/calibrators/{name}/versions", json=body)
    assert response.status_code == 201, response.text
    return response


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()
