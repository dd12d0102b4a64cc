"""What an HTTP fit costs over the same fit in process (#23 item 9): 50000 x 100 float32 logits and
labels as one ``.npz`` body, ``POST /v1/calibrators/{name}/versions`` on a live server, against the
core's fit of the same method plus the same validation report (``app.registry.reports.fit_report``) in this
process, plus the body's transfer.

Rounds are interleaved (in process, HTTP fit, transfer; repeated), so drift on a shared machine
hits all three alike; the ratio of each round is ``http / (in process + transfer)``, and the table
gives the median and the range over rounds. The transfer is the same body POSTed to a fit whose
name is refused once the body has been read (the request, its body and a short answer; no decode).

Memory: a server's resident set size read from ``/proc`` every 5 ms during one fit, above its RSS
just before, as a multiple of the body's bytes; for the timed shape and for 50000 x 1000 (a 191 MiB
body, with the body and entry limits raised). The server (one work thread) has fitted the same
body once (first-use imports, caches and heap growth are not counted) and then 1000 of its rows
(before work threads dropped their finished task, the large body stayed held until the next one).

Run: ``flock /tmp/calib-bench.lock python benchmarks/http_fit.py [--rounds 9] [--method temperature]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import calibration as cal  # noqa: E402
from app.registry import reports  # noqa: E402
from benchmarks._common import environment, write  # noqa: E402
from benchmarks.observations_scale import npz, rss, synthetic  # noqa: E402
from tests.service.support.live import LiveServer  # noqa: E402

MIB = 1 << 20
NPZ = {"content-type": "application/x-npz"}


def in_process(method: str, logits, labels) -> dict:
    inputs = cal.validate_inputs(logits, "logits")
    checked = cal.check_labels(labels, inputs.n, inputs.k)
    calibrator = cal.create(method, {"input": "logits"}).fit_batch(inputs, checked, warn=False)
    return reports.fit_report(inputs, calibrator.predict_batch, checked)


class Peak:
    """The largest RSS of one process while the block runs (read every 5 ms)."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss(self.pid))

    def __enter__(self):
        self.before = rss(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def spread(seconds: list[float]) -> str:
    """Median (range) in milliseconds."""
    return f"{statistics.median(seconds) * 1e3:.0f} ms ({min(seconds) * 1e3:.0f}–{max(seconds) * 1e3:.0f})"


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fit_over_http(client: httpx.Client, body: bytes, method: str) -> None:
    response = client.post(f"/v1/calibrators/bench/versions?method={method}", content=body, headers=NPZ)
    assert response.status_code == 201, response.text[:500]


def transfer(client: httpx.Client, body: bytes) -> None:
    response = client.post("/v1/calibrators/not%20a%20name/versions", content=body, headers=NPZ)
    assert response.status_code == 422, response.text[:500]


def peak_of_fit(url: str, env: dict, directory: str, logits, labels, method: str) -> tuple[int, int]:
    """The growth of a server's RSS during one fit of ``logits``, above its RSS just before. The
    server has one work thread, which keeps its last task's arguments until its next task: it fits
    the same body once (imports, caches, the heap's first growth), then 1000 of its rows (so the
    large body is no longer held), and then the body is measured."""
    server = LiveServer(url, env={**env, "CALIBRATION_WORK_THREADS": "1"}, log_file=f"{directory}/memory.log")
    base = server.start()
    try:
        client = httpx.Client(base_url=base, timeout=600)
        body = npz(logits=logits, labels=labels)
        fit_over_http(client, body, method)
        fit_over_http(client, npz(logits=logits[:1000], labels=labels[:1000]), method)
        time.sleep(0.5)
        with Peak(server.process.pid) as peak:
            fit_over_http(client, body, method)
        return peak.peak - peak.before, len(body)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=50000)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--big-classes", type=int, default=1000, help="classes of the memory-only case (0: none)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--method", default="temperature")
    args = parser.parse_args()
    logits, labels = synthetic(args.rows, args.classes)
    body = npz(logits=logits, labels=labels)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        limits = {"CALIBRATION_MAX_BODY_BYTES": str(1 << 30), "CALIBRATION_MAX_ARRAY_BYTES": str(1 << 31),
                  "CALIBRATION_MAX_ENTRIES": str(1 << 27), "CALIBRATION_SYNC_BUDGET_SECONDS": "600"}
        server = LiveServer(f"sqlite:///{directory}/fit.db", env=limits, log_file=f"{directory}/server.log")
        base = server.start()
        try:
            client = httpx.Client(base_url=base, timeout=600)
            for _ in range(2):  # warm both sides
                in_process(args.method, logits, labels), fit_over_http(client, body, args.method)
                transfer(client, body)
            local, remote, moved = [], [], []
            for _ in range(args.rounds):
                local.append(timed(lambda: in_process(args.method, logits, labels)))
                remote.append(timed(lambda: fit_over_http(client, body, args.method)))
                moved.append(timed(lambda: transfer(client, body)))
            ratios = [r / (lo + m) for lo, r, m in zip(local, remote, moved, strict=True)]
        finally:
            server.stop()
        grown, _ = peak_of_fit(f"sqlite:///{directory}/memory.db", limits, directory, logits, labels, args.method)
        rows.append([f"{args.rows} x {args.classes}", f"{len(body) / MIB:.1f} MiB", spread(local),
                     spread(remote), spread(moved),
                     f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}–{max(ratios):.2f})",
                     f"{grown / MIB:.0f} MiB ({grown / len(body):.2f}x)"])
        if args.big_classes:
            big_logits, big_labels = synthetic(args.rows, args.big_classes)
            grown, size = peak_of_fit(f"sqlite:///{directory}/big.db", limits, directory, big_logits, big_labels,
                                      args.method)
            rows.append([f"{args.rows} x {args.big_classes}", f"{size / MIB:.1f} MiB", "-", "-", "-", "-",
                         f"{grown / MIB:.0f} MiB ({grown / size:.2f}x)"])
    write("http_fit", f"An HTTP fit ({args.method}, float32 .npz) against the same fit and report in process",
          ["shape", "body", "in process", "HTTP fit", "transfer", "HTTP / (in process + transfer)",
           "server peak above before (x body)"], rows, environment(["numpy", "scipy", "fastapi", "uvicorn"]),
          f"Times: median (range) of {args.rounds} interleaved rounds, one process each side (1 uvicorn worker, "
          "SQLite). In process: validate_inputs + fit + app.registry.reports.fit_report. Transfer: the body POSTed "
          "to a fit whose name is refused after the body is read. Peak: the RSS of a server with one work thread, "
          "sampled every 5 ms during one fit, above its RSS just before (after a fit of the same body, then one of "
          "1000 of its rows).")


if __name__ == "__main__":
    main()
