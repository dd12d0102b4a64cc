"""The floor for /calibrate: a bare FastAPI app doing only decode -> softmax(z / T) -> encode.

``POST /json``: orjson body ``{"logits": [[...]]}`` -> ``{"probabilities": [[...]]}``.
``POST /npy``: an .npy body (np.load, no pickles) -> the .npy of the float64 probabilities.
``POST /npy32``: the same softmax (in float64), answered as a float32 .npy.
``POST /oip32``: an Open Inference Protocol binary request (JSON header of
``Inference-Header-Content-Length`` bytes, then the tensor) -> the softmax, answered as the
protocol's JSON header and the float32 probabilities.
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


def from_npy32(body: bytes) -> bytes:
    logits = np.load(io.BytesIO(body), allow_pickle=False).astype(np.float64)
    out = io.BytesIO()
    np.save(out, softmax(logits / TEMPERATURE).astype(np.float32), allow_pickle=False)
    return out.getvalue()


def from_oip32(body: bytes, header_length: int) -> tuple[bytes, int]:
    tensor = orjson.loads(body[:header_length])["inputs"][0]
    logits = np.frombuffer(body, dtype=np.float32, offset=header_length).reshape(tensor["shape"])
    probabilities = softmax(logits.astype(np.float64) / TEMPERATURE).astype(np.float32)
    header = orjson.dumps({"model_name": "floor", "outputs": [
        {"name": "probabilities", "datatype": "FP32", "shape": list(probabilities.shape),
         "parameters": {"binary_data_size": probabilities.nbytes}}]})
    return header + probabilities.tobytes(), len(header)


@app.post("/npy32")
async def calibrate_npy32(request: Request):
    return Response(from_npy32(await request.body()), media_type="application/x-npy")


@app.post("/oip32")
async def calibrate_oip32(request: Request):
    body, length = from_oip32(await request.body(), int(request.headers["inference-header-content-length"]))
    return Response(body, media_type="application/octet-stream",
                    headers={"inference-header-content-length": str(length)})


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
