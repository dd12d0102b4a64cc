"""Where a ``/v2`` binary infer request's CPU goes in the running servers, by shared object and by
symbol: the service and the bare app (``benchmarks/floor_app.py`` ``/oip32``), each under ``wrk`` as in
``calibrate_batch_sizes.py``, each sampled by Linux ``perf record -e cpu-clock`` (no hardware counters
needed) while the load runs. Reported: µs of CPU a request per shared object (``libpython`` is the
interpreter running Python code, ``_multiarray_umath`` numpy's loops, ``[kernel.kallsyms]`` the system
calls), then the symbols whose cost differs most between the two. Samples are wall-clock ticks of the
server's threads while on a CPU, so the figures add up to its CPU time a request.

Run: ``flock /tmp/cpu.lock python benchmarks/v2_perf.py [--rows 64] [--seconds 3] [--connections 8]
[--frequency 4000] [--symbols 25]``; needs ``perf`` and permission to attach to a child process.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.calibrate_batch_sizes import arg, bodies, fit_bench_calibrator, wrk  # noqa: E402
from benchmarks.service_latency import start, wait  # noqa: E402
from tests.service.support.live import free_port  # noqa: E402


def per_request(data: Path, key: str, requests: int, frequency: int) -> dict[str, float]:
    """µs a request of each ``key`` (``dso`` or ``sym``) in a ``perf record`` file."""
    text = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", key, "-g", "none", "-n", "-q"],
                          capture_output=True, text=True, check=True).stdout
    samples = {}
    for line in text.splitlines():
        match = re.match(r"\s*[\d.]+%\s+(\d+)\s+(.*\S)", line)
        if match:
            samples[match.group(2)] = int(match.group(1)) * 1e6 / frequency / requests
    return samples


def main():
    if shutil.which("perf") is None:
        sys.exit("needs Linux perf")
    rows, seconds = int(arg("--rows", "64")), float(arg("--seconds", "3"))
    connections, frequency = int(arg("--connections", "8")), int(arg("--frequency", "4000"))
    workdir = Path(tempfile.mkdtemp())
    rng = np.random.default_rng(0)
    path, media, length = bodies(workdir, rows, rng)["v2"]
    port, floor_port = free_port(), free_port()
    service = start([sys.executable, "-m", "app.cli", "serve"],
                    {"DATABASE_URL": f"sqlite:///{workdir}/bench.db", "CALIBRATION_PORT": str(port),
                     "CALIBRATION_WORKERS": "1", "CALIBRATION_LOG_LEVEL": "warning",
                     "CALIBRATION_MAX_BODY_BYTES": str(128 << 20)})
    floor = start([sys.executable, "-m", "uvicorn", "benchmarks.floor_app:app", "--port", str(floor_port),
                   "--workers", "1", "--no-access-log", "--log-level", "warning"], {})
    base, floor_base = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{floor_port}"
    found: dict[str, dict] = {}
    try:
        wait(f"{base}/readyz")
        wait(f"{floor_base}/docs")
        fit_bench_calibrator(base, rng)
        for who, url, pid in (("service", f"{base}/v2/models/bench/infer", service.pid),
                              ("floor", f"{floor_base}/oip32", floor.pid)):
            wrk(url, path, media, 1, connections, length, pid)  # warm: the hot path learns its cost
            data = workdir / f"{who}.data"
            recorder = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", str(frequency), "-p", str(pid),
                                         "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            run = wrk(url, path, media, seconds, connections, length, pid)
            recorder.send_signal(2)
            recorder.wait(timeout=60)
            found[who] = {key: per_request(data, key, run["requests"], frequency) for key in ("dso", "sym")}
            print(f"{who}: {run['rps']:.1f} req/s, {run['cpu_ms'] * 1e3:.0f} µs CPU a request "
                  f"({sum(found[who]['dso'].values()):.0f} sampled)")
    finally:
        for process in (service, floor):
            process.terminate()
            process.wait(timeout=30)
    for key, limit in (("dso", 10), ("sym", int(arg("--symbols", "25")))):
        ours, bare = found["service"][key], found["floor"][key]
        names = sorted(set(ours) | set(bare), key=lambda name: -abs(ours.get(name, 0) - bare.get(name, 0)))
        print(f"\n| {key} | service µs/req | floor µs/req | difference |\n|---|---|---|---|")
        for name in names[:limit]:
            print(f"| `{name[:70]}` | {ours.get(name, 0):.1f} | {bare.get(name, 0):.1f} | "
                  f"{ours.get(name, 0) - bare.get(name, 0):+.1f} |")


if __name__ == "__main__":
    main()
