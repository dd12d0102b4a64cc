"""The floor for /calibrate: a bare FastAPI app doing only decode -> softmax(z / T) -> encode.

``POST /json``: orjson body ``{"logits": [[...]]}`` -> ``{"probabilities": [[...]]}``.
``POST /npy``: an .npy body (np.load, no pickles) -> the .npy of the float64 probabilities.
Run: ``uvicorn benchmarks.floor_app:app --workers N``.
"""

import io

import numpy as np
import orjson
from fastapi import FastAPI, Request
from starlette.responses import Response

app = FastAPI()
TEMPERATURE = 1.7


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@app.post("/json")
async def calibrate_json(request: Request):
    logits = np.asarray(orjson.loads(await request.body())["logits"], dtype=np.float64)
    body = orjson.dumps({"probabilities": softmax(logits / TEMPERATURE)}, option=orjson.OPT_SERIALIZE_NUMPY)
    return Response(body, media_type="application/json")


@app.post("/npy")
async def calibrate_npy(request: Request):
    logits = np.load(io.BytesIO(await request.body()), allow_pickle=False).astype(np.float64)
    out = io.BytesIO()
    np.save(out, softmax(logits / TEMPERATURE), allow_pickle=False)
    return Response(out.getvalue(), media_type="application/x-npy")
