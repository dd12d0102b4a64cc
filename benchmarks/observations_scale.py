"""An ImageNet-sized validation set through the online loop: 50000 x 1000 float32 (200 MB) appended
in chunks under the body limit, then fitted from the stored observations (TS, and ``auto`` as a
job), with the server's peak memory.

A live server (``calibration-service serve``, one process, SQLite in a temporary directory, or
Postgres with ``--postgres``). The logits are synthetic with ImageNet's shape: a true class per row,
logits ``N(0, 1)`` plus 4 on the true class, divided by 0.5 for over-confidence. Memory is the
resident set size read from ``/proc`` every 20 ms: the server process and, for a job, the
embedded pool's process that runs it; reported above the server's idle baseline and as a multiple
of the array's bytes. Append throughput is rows per second over all chunks (encode excluded).

Run: ``python benchmarks/observations_scale.py [--rows 50000 --classes 1000 --chunk 10000] [--auto]``.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import environment, write  # noqa: E402
from tests.service.support.live import LiveServer  # noqa: E402

MIB = 1 << 20


def rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        children.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return children + [g for c in children for g in descendants(c)]


class PeakMemory:
    """The largest RSS of a process and, separately, of each of its descendants, while running;
    ``idle`` holds each descendant's RSS when the watch began (a job pool's idle processes)."""

    def __init__(self, pid: int):
        self.pid, self.server, self.children = pid, 0, {}
        self.idle = {child: rss(child) for child in descendants(pid)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    @property
    def child(self) -> int:
        return max(self.children.values(), default=0)

    def busiest(self) -> tuple[int, int | None]:
        """The peak RSS of the descendant that grew most, and its RSS before (None: it is new)."""
        pid = max(self.children, key=lambda c: self.children[c] - self.idle.get(c, 0))
        return self.children[pid], self.idle.get(pid)

    def _watch(self):
        while not self._stop.wait(0.02):
            self.server = max(self.server, rss(self.pid))
            for child in descendants(self.pid):
                self.children[child] = max(self.children.get(child, 0), rss(child))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def synthetic(rows: int, classes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, rows)
    logits = rng.standard_normal((rows, classes), dtype=np.float32)
    logits[np.arange(rows), labels] += 4.0
    return (logits / 0.5).astype(np.float32), labels


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def wait_job(client: httpx.Client, location: str) -> dict:
    while True:
        job = client.get(location).json()
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=50000)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=10000)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--auto", action="store_true", help="also fit auto as a job (7 minutes here)")
    args = parser.parse_args()
    logits, labels = synthetic(args.rows, args.classes)
    nbytes = logits.nbytes
    bodies = [npz(logits=logits[s:s + args.chunk], labels=labels[s:s + args.chunk])
              for s in range(0, args.rows, args.chunk)]
    with tempfile.TemporaryDirectory() as directory:
        if args.postgres:
            from tests.service.support.databases import create_postgres_database
            url, drop = create_postgres_database()
        else:
            url, drop = f"sqlite:///{directory}/scale.db", (lambda: None)
        server = LiveServer(url, env={"CALIBRATION_JOB_PROCESSES": "1"}, log_file=f"{directory}/server.log")
        base = server.start()
        try:
            client = httpx.Client(base_url=base, timeout=600)
            time.sleep(1.0)
            baseline = rss(server.process.pid)
            rows = []
            with PeakMemory(server.process.pid) as peak:
                start = time.perf_counter()
                for body in bodies:
                    response = client.post("/v1/calibrators/imagenet/observations", content=body,
                                           headers={"content-type": "application/x-npz"})
                    assert response.status_code == 201, response.text
                seconds = time.perf_counter() - start
            rows.append(["append in chunks", f"{len(bodies)} x {max(len(b) for b in bodies) / MIB:.0f} MiB",
                         f"{seconds:.1f} s ({args.rows / seconds:,.0f} rows/s)",
                         f"{(peak.server - baseline) / MIB:.0f} MiB ({(peak.server - baseline) / nbytes:.2f}x)", "-"])
            fits = [("temperature", ""), ("temperature", "respond-async")]
            fits += [("auto", "respond-async")] if args.auto else []
            for method, prefer in fits:
                time.sleep(0.5)
                before = rss(server.process.pid)
                with PeakMemory(server.process.pid) as peak:
                    start = time.perf_counter()
                    response = client.post("/v1/calibrators/imagenet/versions",
                                           json={"method": method, "data": {"observations": {}}},
                                           headers={"prefer": prefer} if prefer else {})
                    if response.status_code == 202:
                        job = wait_job(client, response.headers["location"])
                        assert job["status"] == "succeeded", job
                        version = job["result"]
                    else:
                        assert response.status_code == 201, response.text
                        version = response.json()
                    seconds = time.perf_counter() - start
                where = "job process" if response.status_code == 202 else "server"
                grown = (peak.child if response.status_code == 202 else peak.server - baseline)
                what = version["method"]
                if method == "auto":  # the pick, and each candidate's seconds over all folds
                    comparison, what = version["report"]["comparison"], f"auto: {version['parameters']['chosen']}"
                    cross_validation = ", ".join(f"{m['name']} {m['mean']['fit_seconds'] * comparison['folds']:.1f} s"
                                                 for m in comparison["methods"])
                job_note = ""
                if response.status_code == 202:
                    job_peak, job_idle = peak.busiest()
                    grew = job_peak - (job_idle or 0)
                    job_note = ("a new job process; " if job_idle is None else
                                f"job process {grew / MIB:.0f} MiB ({grew / nbytes:.2f}x) above its idle "
                                f"{job_idle / MIB:.0f} MiB (its runtime); ")
                rows.append([f"fit {method} from the log ({where})", what, f"{seconds:.1f} s",
                             f"{grown / MIB:.0f} MiB ({grown / nbytes:.2f}x)",
                             f"{job_note}server {(peak.server - baseline) / MIB:.0f} MiB; "
                             f"{(peak.server - before) / MIB:.0f} MiB ({(peak.server - before) / nbytes:.2f}x) "
                             "above its RSS just before"])
        finally:
            server.stop()
            drop()
    notes = ("A job's memory is that of the pool process that ran it (its whole RSS; in the note, above its RSS "
             "just before the job where the process already ran, idle: the pool keeps its processes); "
             "the server's is above its idle baseline (before the appends, so what the appends left in the heap "
             "counts), and in the note also above its RSS just before the fit.")
    if args.auto:
        notes += (f" auto's cross-validation, per candidate over the {comparison['folds']} folds (fit, held-out "
                  f"prediction and metrics): {cross_validation}.")
    write("observations_scale", f"{args.rows} x {args.classes} float32 ({nbytes / MIB:.0f} MiB) through the "
          f"observations ({'Postgres' if args.postgres else 'SQLite'})",
          ["step", "what", "time", "peak memory (above idle; x array bytes)", "note"], rows,
          environment(["numpy", "scipy", "sqlalchemy"]), notes)


if __name__ == "__main__":
    main()
