"""numpy against torch for the same calibrators, in one run: fits of temperature scaling and
expectation consistency on ImageNet-size logits (50000 x 1000), and calibrate (``predict_proba``
of a fitted TS) on 64 x 1000 and 4096 x 1000 batches. torch runs on the CPU, and on CUDA when
``torch.cuda.is_available()`` (the device is recorded). Times are the best of ``--repeat``
runs after a warm-up; CUDA times include the synchronisation that makes the result usable.

The logits are synthetic, ``3 * N(0, 1)`` with labels drawn from ``softmax(z / 2)`` (the
reference input's recipe at ImageNet size). numpy works in float64; torch gets float64 and
float32 tensors (fits always run in float64 on the device; prediction returns the input dtype).

Run: ``python benchmarks/torch_backend.py [--repeat 3]`` (needs the torch extra).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment, write


def best_of(fn, repeat: int, synchronise) -> float:
    fn()
    synchronise()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        synchronise()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--k", type=int, default=1000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    logits = 3.0 * rng.standard_normal((args.n, args.k))
    labels = (logits / 2.0 + rng.gumbel(size=logits.shape)).argmax(axis=1)
    devices = [("numpy", None), ("torch cpu", "cpu")]
    if torch.cuda.is_available():
        devices.append((f"torch {torch.cuda.get_device_name(0)}", "cuda"))

    def synchroniser(target):
        return torch.cuda.synchronize if target == "cuda" else (lambda: None)

    rows, baseline = [], {}
    fitted = cal.create("temperature").fit(logits[:5000], labels[:5000])
    for task, n_rows in (("fit temperature", args.n), ("fit expectation_consistency", args.n),
                         ("calibrate 64 x 1000", 64), ("calibrate 4096 x 1000", 4096)):
        x = logits[:n_rows] if task.startswith("calibrate") else logits

        for label, target in devices:
            dtypes = [None] if target is None else [torch.float64, torch.float32]
            for dtype in dtypes:
                if target is None:
                    data, y = x, labels
                else:
                    data = torch.asarray(x, dtype=dtype, device=target)
                    y = torch.asarray(labels, device=target)
                if task.startswith("fit"):
                    method = task.split()[1]
                    seconds = best_of(lambda d=data, y=y, m=method: cal.create(m).fit(d, y), args.repeat,
                                      synchroniser(target))
                    result = cal.create(method).fit(data, y).temperature_
                    detail = f"T = {result:.12f}"
                else:
                    seconds = best_of(lambda d=data: fitted.predict_proba(d), args.repeat * 20, synchroniser(target))
                    detail = ""
                name = label + ("" if dtype is None else f" {str(dtype).removeprefix('torch.')}")
                if target is None:
                    baseline[task] = seconds
                ratio = baseline[task] / seconds
                rows.append([task, name, f"{seconds * 1000:.2f}", f"{ratio:.2f}x", detail])
                print(rows[-1], flush=True)
    notes = ("Speed-up is numpy's time over this row's (above 1: faster than numpy). "
             f"Data: {args.n} x {args.k} synthetic logits. "
             f"Run: `python benchmarks/torch_backend.py --repeat {args.repeat}`.")
    write("torch_backend", "numpy and torch: TS/EC fits and calibrate", ["task", "backend", "ms", "speed-up", "fit"],
          rows, environment(["numpy", "torch", "array-api-compat"]), notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
