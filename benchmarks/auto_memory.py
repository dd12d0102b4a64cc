"""Peak memory of ``auto`` fitted the way a job fits it from stored observations, in process.

Each case runs in a fresh Python process: the synthetic logits of ``observations_scale`` (float32,
``rows x classes``) are generated block by block straight into the float64 array that
``app.observations.store.load`` hands a fit (the job process never holds the float32 array), then
``auto`` is fitted on it as the service does (``validate_inputs``, ``fit_batch``, the fit report
over row blocks). Memory is the process's peak resident set (``VmHWM``) above its resident set
after the imports (the runtime), as a multiple of the float32 array's bytes (what the issue's 3x
is counted against). ``--each`` also runs every candidate alone (its cross-validation and its fit), and
``--trace`` reports tracemalloc's peak instead (numpy allocations, slower). ``--float32`` fills a
float32 array instead (as ``load(..., dtype=np.float32)`` would hand it), marked reorderable the same way,
so the folds are laid out in place in float32. ``--from-log`` goes through the service instead: a
child process appends the rows as float32 ``.npz`` chunks of 10000 rows to a SQLite database in a
temporary directory; then, in a process that did not write them (as a job's), the fit is what a fit
job runs: ``Observations.load`` (in the chunks' own dtype) and ``CalibrationService.fit``
(validation, ``auto``'s cross-validation and refit, the fit report, the stored version). Its phases
are ``load`` and ``fit``; the runtime baseline is taken once its app is built.

Run: ``python benchmarks/auto_memory.py [--rows 10000 --classes 1000] [--each] [--candidates a,b]
[--float32 | --from-log]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
DEFAULT = "temperature,ensemble_temperature,expectation_consistency,isotonic_multiclass,vector"


def status(field: str) -> int:
    with open("/proc/self/status") as lines:
        for line in lines:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def synthetic_blocks(rows: int, classes: int):
    """Labels and the float32 logits' row blocks of 1000 (the true class raised by 4, over 0.5)."""
    import numpy as np

    rng = np.random.default_rng(0)
    labels = rng.integers(0, classes, rows)

    def blocks():
        for start in range(0, rows, 1000):
            block = rng.standard_normal((min(1000, rows - start), classes), dtype=np.float32)
            block[np.arange(len(block)), labels[start:start + len(block)]] += 4.0
            yield start, (block / 0.5).astype(np.float32)

    return labels, blocks


def app_client(database_url: str):
    from fastapi.testclient import TestClient

    sys.path.insert(0, str(REPO))
    from app.settings import Settings
    from app.wiring import create_app

    return TestClient(create_app(Settings(database_url=database_url, job_engine="embedded", log_level="warning",
                                          max_body_bytes=1 << 30, max_array_bytes=1 << 30, max_entries=1 << 30)))


def fill(database_url: str, rows: int, classes: int) -> None:
    """The synthetic rows appended to the log as float32 ``.npz`` chunks of 10000 rows."""
    import io

    import numpy as np

    sys.path.insert(0, str(REPO))
    from app.platform.migrate import upgrade

    upgrade(database_url)
    labels, blocks = synthetic_blocks(rows, classes)
    with app_client(database_url) as client:
        parts = []
        for start, block in blocks():
            parts.append(block)
            stop = start + len(block)
            if stop % 10000 == 0 or stop == rows:
                buffer = io.BytesIO()
                np.savez(buffer, logits=np.concatenate(parts), labels=labels[stop - sum(map(len, parts)):stop])
                parts = []
                response = client.post("/v1/calibrators/log/observations", content=buffer.getvalue(),
                                       headers={"content-type": "application/x-npz"})
                assert response.status_code == 201, response.text


def from_log(rows: int, classes: int, candidates: list[str], trace: bool) -> dict:
    """``auto`` fitted from the prediction log's observations through the service, in a process that
    did not write them (as a job's): the appends run in a child process first."""
    import tempfile
    import time
    import tracemalloc

    sys.path.insert(0, str(REPO))
    from app.observations.values import ObservationSelection
    from app.registry.serving import FitSpec

    with tempfile.TemporaryDirectory() as directory:
        database_url = f"sqlite:///{directory}/log.db"
        subprocess.run([sys.executable, __file__, "--fill", database_url, "--rows", str(rows),
                        "--classes", str(classes)], check=True)
        with app_client(database_url) as client:
            service = client.app.state.service
            baseline = status("VmRSS")
            nbytes = rows * classes * 4
            peaks = {}

            def phase(name: str) -> None:
                record_peak(peaks, name, baseline, nbytes)

            phase("start")
            if trace:
                tracemalloc.start()
            started = time.perf_counter()
            options = {"candidates": candidates} if len(candidates) > 1 else {}
            fields = FitSpec(method="auto" if len(candidates) > 1 else candidates[0], options=options,
                             data=ObservationSelection())
            batch = service.observations.load(fields, service.observations.fit_index("log", ObservationSelection()))
            dtype = str(batch.values.dtype)
            phase("load")
            view = service.fit("log", batch)
            del batch
            phase("fit")
            seconds = time.perf_counter() - started
            traced = tracemalloc.get_traced_memory()[1] if trace else 0
            del peaks["start"]
    chosen = (view["parameters"] or {}).get("chosen") or view["method"]
    return {"candidates": candidates, "chosen": f"{chosen} ({dtype} load)", "seconds": seconds, "holding_x": 0.0,
            "peak_x": max(peaks.values()), "phases": peaks, "traced_x": traced / nbytes,
            "peak_mib": max(peaks.values()) * nbytes / MIB}


def record_peak(peaks: dict, name: str, baseline: int, nbytes: int) -> None:
    """The peak resident memory since the last phase, in input bytes, then VmHWM reset from here."""
    peaks[name] = (status("VmHWM") - baseline) / nbytes
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def case(rows: int, classes: int, candidates: list[str], trace: bool, float32: bool = False) -> dict:
    """One measurement, in this process."""
    import time
    import tracemalloc

    import numpy as np

    sys.path.insert(0, str(REPO))
    import calibration as cal
    from app.registry import reports
    from calibration.candidates import candidate

    baseline = status("VmRSS")
    labels, blocks = synthetic_blocks(rows, classes)
    logits = np.empty((rows, classes), np.float32 if float32 else np.float64)  # as observation_store.load fills it
    for start, block in blocks():
        logits[start:start + len(block)] = block
    del block
    nbytes = rows * classes * 4
    if hasattr(cal, "allow_reordering"):
        cal.allow_reordering(logits)  # the fit's own array, as app.observations.service.load marks it
    holding = status("VmRSS")
    peaks = {}

    def phase(name: str) -> None:
        record_peak(peaks, name, baseline, nbytes)

    phase("start")
    if trace:
        tracemalloc.start()
    started = time.perf_counter()
    inputs = cal.validate_inputs(logits, "logits")
    y = cal.check_labels(labels, inputs.n, inputs.k)
    if len(candidates) > 1:
        calibrator = cal.create("auto", {"input": "logits", "candidates": candidates})
        calibrator.progress = lambda done, total: phase("cross-validation") if done == total else None
        calibrator.fit_batch(inputs, y, warn=False)
        chosen = calibrator.selection_.chosen.name
    else:  # one candidate: its cross-validation and its fit on all the rows (no selection to refuse it)
        cal.compare(logits, y, candidates)
        phase("cross-validation")
        calibrator = candidate(candidates[0]).create("logits").fit_batch(inputs, y, warn=False)
        chosen = candidates[0]
    phase("refit")
    reports.fit_report(inputs, calibrator.predict_batch, y)
    phase("report")
    seconds = time.perf_counter() - started
    traced = tracemalloc.get_traced_memory()[1] if trace else 0
    del peaks["start"]
    return {"candidates": candidates, "chosen": chosen, "seconds": seconds,
            "holding_x": (holding - baseline) / nbytes, "peak_x": max(peaks.values()), "phases": peaks,
            "traced_x": traced / nbytes, "peak_mib": max(peaks.values()) * nbytes / MIB}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--candidates", default=DEFAULT)
    parser.add_argument("--each", action="store_true", help="also each candidate alone")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--float32", action="store_true", help="the fit's array in float32, not float64")
    parser.add_argument("--from-log", action="store_true",
                        help="append float32 chunks to a SQLite log and fit from it through the service")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--fill", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fill:
        fill(args.fill, args.rows, args.classes)
        return
    if args.case:
        measure = from_log if args.from_log else case
        extra = () if args.from_log else (args.float32,)
        print(json.dumps(measure(args.rows, args.classes, args.case.split(","), args.trace, *extra)))
        return
    names = args.candidates.split(",")
    runs = ([[n] for n in names] if args.each else []) + [names]
    print(f"{args.rows} x {args.classes} float32 ({args.rows * args.classes * 4 / MIB:.0f} MiB); "
          "peak RSS above the runtime, x the float32 array's bytes "
          + ("(from the log through the service)" if args.from_log
             else "(the fit's array is float32: 1x)" if args.float32 else "(the float64 array held is 2x)"))
    for run in runs:
        command = [sys.executable, __file__, "--rows", str(args.rows), "--classes", str(args.classes),
                   "--case", ",".join(run)]
        command += (["--trace"] if args.trace else []) + (["--float32"] if args.float32 else [])
        command += ["--from-log"] if args.from_log else []
        result = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        traced = f"  traced {result['traced_x']:.2f}x" if args.trace else ""
        phases = ", ".join(f"{name} {value:.2f}x" for name, value in result["phases"].items())
        print(f"{','.join(run):<40} peak {result['peak_x']:5.2f}x ({result['peak_mib']:.0f} MiB){traced} ({phases})"
              f"  {result['seconds']:.1f} s  chose {result['chosen']}", flush=True)


if __name__ == "__main__":
    main()
