"""The floor for /calibrate: a bare FastAPI app doing only decode -> softmax(z / T) -> encode.

``POST /json``: orjson body ``{"logits": [[...]]}`` -> ``{"probabilities": [[...]]}``.
``POST /npy``: an .npy body (np.load, no pickles) -> the .npy of the float64 probabilities.
Both compute on the event loop, which the service may not do (its numeric work runs on a
worker thread). ``/json-threaded`` and ``/npy-threaded`` do the same work on anyio's thread
pool, as FastAPI runs a plain ``def`` endpoint: the floor under the service's own rule.
Run: ``uvicorn benchmarks.floor_app:app --workers N``.
"""

import io

import numpy as np
import orjson
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

app = FastAPI()
TEMPERATURE = 1.7


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def from_json(body: bytes) -> bytes:
    logits = np.asarray(orjson.loads(body)["logits"], dtype=np.float64)
    return orjson.dumps({"probabilities": softmax(logits / TEMPERATURE)}, option=orjson.OPT_SERIALIZE_NUMPY)


def from_npy(body: bytes) -> bytes:
    logits = np.load(io.BytesIO(body), allow_pickle=False).astype(np.float64)
    out = io.BytesIO()
    np.save(out, softmax(logits / TEMPERATURE), allow_pickle=False)
    return out.getvalue()


@app.post("/json")
async def calibrate_json(request: Request):
    return Response(from_json(await request.body()), media_type="application/json")


@app.post("/npy")
async def calibrate_npy(request: Request):
    return Response(from_npy(await request.body()), media_type="application/x-npy")


@app.post("/json-threaded")
async def calibrate_json_threaded(request: Request):
    return Response(await run_in_threadpool(from_json, await request.body()), media_type="application/json")


@app.post("/npy-threaded")
async def calibrate_npy_threaded(request: Request):
    return Response(await run_in_threadpool(from_npy, await request.body()), media_type="application/x-npy")
