"""What each copy removed from the binary codecs saves: bytes allocated at the peak (tracemalloc,
which numpy reports its buffers to) and time per call (best of 5 repeats), before and after, for
float32 logits of 64, 4096 and 16384 rows x 1000 classes.

- decode ``.npy``: the header was parsed from a copy of the body's first 64 KiB; now from the
  header's own bytes (``app.codecs.read_npy``; the data is viewed in place with ``np.frombuffer``
  either way). ``np.load(BytesIO)``, which copies the data, is shown for reference.
- encode a float32 ``.npy`` answer: ``write_npy(p.astype(float32))`` (the cast, then the joined
  copy) against ``npy_parts(p, float32)`` (the cast alone; the route sends header and data as they
  are).
- encode a float64 ``.npy`` answer: ``write_npy(p)`` (the joined copy) against ``npy_parts(p)``
  (none).
- encode a ``/v2`` FP32 binary output: ``tobytes`` + ``b"".join`` + header concatenation (three
  copies after the cast) against the cast and a view (``app.oip.infer``'s parts).

Run: ``flock /tmp/cpu.lock python benchmarks/codec_copies.py``.
"""

from __future__ import annotations

import io
import sys
import tracemalloc
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.wire import codecs  # noqa: E402
from benchmarks._common import best_of, environment, machine, save  # noqa: E402


def old_read_npy(data: bytes) -> np.ndarray:
    """``read_npy`` as it was: the header parsed from a copy of the first 64 KiB."""
    shape, _, dtype, offset = codecs._npy_header(bytes(data[:codecs.MAX_HEADER_BYTES + 12]))
    return np.frombuffer(data, dtype=dtype, offset=offset, count=int(np.prod(shape))).reshape(shape)


def old_v2_body(header: bytes, probabilities: np.ndarray) -> bytes:
    value = np.ascontiguousarray(probabilities, dtype=np.float32)
    return header + b"".join([value.tobytes()])


def new_v2_body(header: bytes, probabilities: np.ndarray) -> list:
    value = np.ascontiguousarray(probabilities, dtype=np.float32)
    return [header, memoryview(value.reshape(-1).view(np.uint8))]


def peak(fn) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    result = fn()
    size = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del result
    return size


def per_call(fn, rows: int) -> float:
    return best_of(fn, repeat=5, warmup=0, number=max(1, 20000 // rows))


def cases(rows: int, rng) -> list:
    """``(step, reference, before, after)`` calls for a batch of ``rows`` x 1000 float32 logits."""
    logits = (3 * rng.standard_normal((rows, 1000))).astype(np.float32)
    buffer = io.BytesIO()
    np.save(buffer, logits, allow_pickle=False)
    body = buffer.getvalue()
    probabilities = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    header = b'{"outputs": []}'
    return [
        ("decode .npy", lambda: np.load(io.BytesIO(body), allow_pickle=False), lambda: old_read_npy(body),
         lambda: codecs.read_npy(body)),
        ("encode float32 .npy", None, lambda: codecs.write_npy(probabilities.astype(np.float32)),
         lambda: codecs.npy_parts(probabilities, np.float32)),
        ("encode float64 .npy", None, lambda: codecs.write_npy(probabilities),
         lambda: codecs.npy_parts(probabilities)),
        ("encode /v2 FP32", None, lambda: old_v2_body(header, probabilities),
         lambda: new_v2_body(header, probabilities)),
    ]


def main():
    rng = np.random.default_rng(0)
    rows_out = []
    for rows in (64, 4096, 16384):
        for name, reference, before, after in cases(rows, rng):
            row = [f"{rows} x 1000", name]
            for fn in (reference, before, after):
                row.append("" if fn is None else f"{peak(fn) / 2**20:.3f} MiB, {1e6 * per_call(fn, rows):.1f} µs")
            rows_out.append(row)
    env = environment(["numpy"])
    lines = ["# Copies removed from the binary codecs: peak bytes allocated and time per call", "",
             machine(env, ["numpy"]),
             "Peak: tracemalloc's, during one call. Time: best of 5 repeats.", "",
             "| batch | step | np.load (reference) | before | after |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows_out]
    save("codec_copies.md", lines)


if __name__ == "__main__":
    main()
