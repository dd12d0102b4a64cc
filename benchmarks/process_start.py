"""CPU seconds each kind of process spends before it does any work, best of ``--repeat`` starts:
``import app.main`` (every server, worker and test process), ``import calibration``, the prediction
log's writer process (its imports and engine, as ``app.prediction_log.pipe.BOOT`` starts it), the
``calibration`` command line (``--help``, and ``versions`` against a running server), and
``calibration-service serve`` from its start to the first 200 on ``/readyz`` on a new SQLite file, and
on a migrated one with the migrations off (the server's process tree, its writer process included,
read from ``/proc``).

``--baseline DIR`` runs the same starts from another checkout (e.g. ``git archive main | tar -x -C
DIR``) with this environment's interpreter, side by side: Python puts the working directory first
on ``sys.path``, so each run imports the tree it starts in.

    python benchmarks/process_start.py --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import cpu_seconds, environment, write  # noqa: E402

PYTHON = sys.executable
CLI = [PYTHON, "-m", "calibration_client.cli"]  # the tree in the working directory, not the installed one
WRITER = ("import sys; sys.path.insert(0, '.'); {gc}import app.prediction_log.process; {gc_on}"
          "from app.platform.db import Database; Database(sys.argv[1])")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def child_cpu(command: list[str], cwd: Path, env: dict | None = None) -> float:
    """User + system CPU seconds of one run of ``command`` (and the children it waited for)."""
    before = os.times()
    subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def serve_to_ready(cwd: Path, scratch: Path, migrated: Path | None = None) -> float:
    """CPU seconds of ``serve`` (its process tree) from its start to its first 200 on ``/readyz``; on
    a copy of ``migrated`` (a database at head) with ``CALIBRATION_MIGRATE_ON_START=false``, as
    docker-compose starts it after ``migrate``, where given."""
    database = scratch / f"ready-{time.monotonic_ns()}.db"
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{database}", "CALIBRATION_PORT": str(port),
           "CALIBRATION_WORKERS": "1", "CALIBRATION_LOG_LEVEL": "warning"}
    if migrated is not None:
        shutil.copyfile(migrated, database)
        env["CALIBRATION_MIGRATE_ON_START"] = "false"
    process = subprocess.Popen([PYTHON, "-m", "app.cli", "serve"], cwd=cwd, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(timeout=1) as http:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if http.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                        return cpu_seconds(process.pid)
                except httpx.TransportError:
                    pass
                time.sleep(0.02)
        raise RuntimeError("the server did not become ready in 60 s")
    finally:
        process.terminate()
        process.wait(timeout=30)


def running_server(cwd: Path, scratch: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{scratch / 'cli.db'}", "CALIBRATION_PORT": str(port),
           "CALIBRATION_LOG_LEVEL": "warning"}
    process = subprocess.Popen([PYTHON, "-m", "app.cli", "serve"], cwd=cwd, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{base}/readyz").status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("the server did not become ready")


def writer_boot(tree: Path) -> str:
    """``WRITER`` as the tree's ``BOOT`` runs it: with the collector off while it imports where it says so."""
    off = "gc.disable()" in (tree / "app/prediction_log/pipe.py").read_text()
    return WRITER.format(gc="import gc; gc.disable(); " if off else "", gc_on="gc.enable(); " if off else "")


def measure(tree: Path, repeat: int) -> dict[str, float]:
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        server, base = running_server(tree, scratch)
        migrated = scratch / "migrated.db"
        subprocess.run([PYTHON, "-m", "app.cli", "migrate"], cwd=tree, check=True, capture_output=True,
                       env={**os.environ, "DATABASE_URL": f"sqlite:///{migrated}"})
        try:
            subprocess.run([*CLI, "--url", base, "calibrators"], cwd=tree, check=False, capture_output=True)
            runs = {
                "import app.main": lambda: child_cpu([PYTHON, "-c", "import app.main"], tree),
                "import calibration": lambda: child_cpu([PYTHON, "-c", "import calibration"], tree),
                "prediction-log writer (imports, engine)": lambda: child_cpu(
                    [PYTHON, "-c", writer_boot(tree), f"sqlite:///{scratch / 'writer.db'}"], tree,
                    {**os.environ, "OPENBLAS_NUM_THREADS": "1"} if "WRITER_ENVIRONMENT" in
                    (tree / "app/prediction_log/pipe.py").read_text() else None),
                "calibration --help": lambda: child_cpu([*CLI, "--help"], tree),
                "calibration calibrators (a server's answer)": lambda: child_cpu(
                    [*CLI, "--url", base, "calibrators"], tree),
                "serve to the first 200 on /readyz": lambda: serve_to_ready(tree, scratch),
                "serve, migrated already, to the first 200 on /readyz": lambda: serve_to_ready(
                    tree, scratch, migrated),
            }
            for name, run in runs.items():
                best[name] = min(run() for _ in range(repeat))
        finally:
            server.terminate()
            server.wait(timeout=30)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout, measured beside this one")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    now = measure(REPO, args.repeat)
    header = ["process", "CPU-s to start (this tree)"]
    rows: list[list] = [[name, f"{value:.2f}"] for name, value in now.items()]
    if args.baseline:
        before = measure(args.baseline.resolve(), args.repeat)
        header = ["process", "baseline CPU-s", "this tree CPU-s", "ratio"]
        rows = [[name, f"{before[name]:.2f}", f"{value:.2f}", f"{value / before[name]:.2f}"]
                for name, value in now.items()]
    write("process_start", "CPU to start each kind of process", header, rows,
          environment(["numpy", "scipy", "sqlalchemy", "fastapi", "httpx"]),
          f"Best of {args.repeat} starts each (user + system CPU seconds of the process and its children); "
          "the writer row as the API process starts it (with its environment where the tree sets one).")


if __name__ == "__main__":
    main()
