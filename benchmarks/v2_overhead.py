"""What the Open Inference Protocol layer costs: /v2/models/{name}/infer with binary tensors
against /v1/calibrators/{name}/calibrate with .npy, for one 64 x 1000 float32 batch, one worker,
``wrk -t1 -c32``, alternating for 3 rounds; medians and the median ratio are reported.

Run: ``python benchmarks/v2_overhead.py [--seconds 8]``.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import environment, write  # noqa: E402
from benchmarks.service_latency import run_wrk, wait  # noqa: E402
from tests.service.support.live import free_port  # noqa: E402


def main():
    seconds = int(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 8
    rng = np.random.default_rng(0)
    fit_logits = 3 * rng.standard_normal((2000, 1000))
    fit_labels = rng.integers(0, 1000, 2000)
    fit_labels[:600] = fit_logits[:600].argmax(axis=1)
    batch = (3 * rng.standard_normal((64, 1000))).astype(np.float32)
    workdir = Path(tempfile.mkdtemp())
    npy = io.BytesIO()
    np.save(npy, batch, allow_pickle=False)
    (workdir / "batch.npy").write_bytes(npy.getvalue())
    header = orjson.dumps({"inputs": [{"name": "logits", "shape": [64, 1000], "datatype": "FP32",
                                       "parameters": {"binary_data_size": batch.nbytes}}],
                           "outputs": [{"name": "probabilities", "parameters": {"binary_data": True}}]})
    (workdir / "batch.oip").write_bytes(header + batch.tobytes())
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], cwd=REPO,
                              env={**os.environ, "DATABASE_URL": f"sqlite:///{workdir}/v2.db",
                                   "CALIBRATION_PORT": str(port), "CALIBRATION_LOG_LEVEL": "warning"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        base = f"http://127.0.0.1:{port}"
        wait(f"{base}/readyz")
        httpx.post(f"{base}/v1/calibrators/bench/versions", timeout=120,
                   json={"method": "temperature", "logits": fit_logits.tolist(), "labels": fit_labels.tolist()})
        rounds = []
        for _ in range(3):
            v1 = run_wrk(f"{base}/v1/calibrators/bench/calibrate", workdir / "batch.npy", "application/x-npy",
                         "application/x-npy", seconds)
            os.environ["HEADER_LENGTH"] = str(len(header))
            v2 = run_wrk(f"{base}/v2/models/bench/infer", workdir / "batch.oip", "application/octet-stream",
                         "application/octet-stream", seconds)
            del os.environ["HEADER_LENGTH"]
            rounds.append((v1, v2))
        for who, index in (("/v1 calibrate (.npy, FP64 out)", 0), ("/v2 infer (binary, FP32 out)", 1)):
            results = [r[index] for r in rounds]
            medians = {key: np.median([r[key] for r in results]) for key in ("rps", "p50", "p99")}
            rows.append([who, f"{medians['rps']:.0f}", f"{medians['p50']:.2f}", f"{medians['p99']:.2f}",
                         sum(r["errors"] for r in results)])
        ratios = sorted(v1["rps"] / v2["rps"] - 1 for v1, v2 in rounds)
        rows.append(["/v2 extra time per request (median of rounds)",
                     f"{np.median(ratios):+.0%} (range {ratios[0]:+.0%} to {ratios[-1]:+.0%})", "", "", ""])
    finally:
        server.terminate()
        server.wait(timeout=20)
    write("v2_overhead", "/v2 binary infer vs /v1 binary calibrate, 64 x 1000 float32, 1 worker, wrk -t1 -c32",
          ["endpoint", "req/s", "p50 ms", "p99 ms", "non-2xx"], rows, environment(["fastapi", "uvicorn", "numpy"]),
          "Extra time per request = (v1 req/s) / (v2 req/s) - 1; negative means /v2 is faster (FP32 output is half "
          "the bytes of /v1's FP64 .npy).")


if __name__ == "__main__":
    main()
