"""Prediction ids through the Python client (issue #37) against a live server (SQLite and
Postgres): ``calibrate(..., ids=...)`` sends the caller's ids (JSON body, or the
``Prediction-Ids`` header with a binary body) and returns the ids the service used, the
generated ones included; labels posted by those ids become observations that ``quality``
counts and scores as the core does."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

import calibration as cal
from calibration_client import AsyncClient, Calibrated, InvalidInput
from calibration_client._protocol import MAX_ID_HEADER_BYTES

GENERATED = re.compile(r"[0-9a-f]{16}-(\d+)")


def generated(ids: list[str], n: int) -> bool:
    """``n`` ids of the service's generated form, row ``i``'s ending in ``-i``, with one prefix."""
    matches = [GENERATED.fullmatch(i) for i in ids]
    return (len(ids) == n and all(matches) and [int(m.group(1)) for m in matches] == list(range(n))
            and len({i.rpartition("-")[0] for i in ids}) == 1)


def test_ids_round_trip_and_their_labels_count_in_quality(client, cifar):
    """Client ids (header and JSON) come back as sent, generated ones (both transports) have the
    service's form; labelling all 200 rows by those ids makes one window of 200 rows served by
    version 1 whose calibrated ECE and NLL equal the core's on the same rows."""
    logits, labels = cifar
    local = cal.create("temperature").fit(logits[:200], labels[:200])
    client.fit("ids", logits[:200], labels[:200])

    off = client.calibrate("ids", logits[200:204], ids=["a", "b", "c", "d"])
    assert off.ids is None and off.logged is None  # logging off: the service used no ids

    assert client.set_logging("ids", 1.0)["sample_rate"] == 1.0
    mine = [f"req-{i}" for i in range(50)]
    binary = client.calibrate("ids", logits[200:250], ids=mine)
    assert binary.ids == mine and binary.logged == 50 and binary.version == 1
    assert binary.dtype == np.float32  # float32 logits: the float64 probabilities, cast once
    assert np.array_equal(binary, local.predict_proba(logits[200:250]).astype(np.float32))
    numbered = np.arange(1000, 1050)  # any array of ids: sent as their strings
    as_json = client.calibrate("ids", logits[250:300], ids=numbered, binary=False)
    assert as_json.ids == [str(i) for i in numbered] and as_json.logged == 50 and as_json.version == 1
    assert np.allclose(as_json, local.predict_proba(logits[250:300]), rtol=0, atol=1e-12)

    made_binary = client.calibrate("ids", logits[300:350])
    made_json = client.calibrate("ids", logits[350:400], binary=False)
    assert generated(made_binary.ids, 50) and generated(made_json.ids, 50)
    assert made_binary.logged == made_json.logged == 50
    assert made_binary.ids[0].rpartition("-")[0] != made_json.ids[0].rpartition("-")[0]  # a prefix a batch
    assert made_binary[:3].ids is None and made_binary[:3].version == 1  # a slice does not know its rows' ids

    every = binary.ids + as_json.ids + made_binary.ids + made_json.ids
    answer = client.label("ids", every, labels[200:400])
    assert answer["statuses"] == ["labelled"] * 200, answer
    assert client.label("ids", mine[:2], labels[200:202])["statuses"] == ["already_labelled"] * 2

    windows = client.quality("ids", window="200", bootstrap=0)["windows"]
    assert [(w["n_rows"], w["versions"]) for w in windows] == [(200, {"1": 200})]
    expected = local.predict_proba(logits[200:400])
    assert windows[0]["calibrated"]["ece"]["estimate"] == pytest.approx(cal.ece(expected, labels[200:400]),
                                                                          rel=1e-9)
    assert windows[0]["calibrated"]["nll"]["estimate"] == pytest.approx(cal.nll(expected, labels[200:400]),
                                                                          rel=1e-9)


def test_ids_too_long_for_a_header_go_as_json(client, cifar):
    """400 ids of 100 characters (over ``MAX_ID_HEADER_BYTES`` joined) still round-trip: the call
    goes as JSON."""
    logits, labels = cifar
    client.fit("long-ids", logits, labels)
    client.set_logging("long-ids", 1.0)
    ids = [f"{i:04d}" + "x" * 96 for i in range(len(labels))]
    assert len(",".join(ids)) > MAX_ID_HEADER_BYTES
    served = client.calibrate("long-ids", logits, ids=ids)
    assert served.ids == ids and served.logged == len(ids)
    assert client.label("long-ids", ids[:3], labels[:3])["statuses"] == ["labelled"] * 3


def test_bad_ids_are_refused(client, cifar):
    logits, labels = cifar
    client.fit("bad-ids", logits[:50], labels[:50])
    with pytest.raises(ValueError, match="ids has 2 entries for 3 rows"):
        client.calibrate("bad-ids", logits[:3], ids=["a", "b"])
    with pytest.raises(ValueError, match="commas"):
        client.calibrate("bad-ids", logits[:2], ids=["a,b", "c"])
    with pytest.raises(InvalidInput, match="distinct"):  # the service's own check, for both transports
        client.calibrate("bad-ids", logits[:2], ids=["a", "a"])
    with pytest.raises(InvalidInput, match="reserved"):
        client.calibrate("bad-ids", logits[:1], ids=["0123456789abcdef-0"], binary=False)
    for unsendable in (["caf\u00e9"], [" a"], ["tab\there"]):  # not as they are in a header: sent as JSON
        with pytest.raises(InvalidInput, match="printable ASCII"):
            client.calibrate("bad-ids", logits[:1], ids=unsendable)


def test_the_async_client_sends_and_returns_ids(service, cifar):
    logits, labels = cifar

    async def go() -> tuple[Calibrated, Calibrated]:
        async with AsyncClient(service.url, api_key=service.keys["admin"], retries=0) as client:
            await client.fit("async-ids", logits[:100], labels[:100])
            await client.set_logging("async-ids", 1.0)
            return (await client.calibrate("async-ids", logits[:4], ids=["w", "x", "y", "z"]),
                    await client.calibrate("async-ids", logits[:4], binary=False))

    mine, made = asyncio.run(go())
    assert mine.ids == ["w", "x", "y", "z"] and mine.logged == 4 and generated(made.ids, 4)
