"""The drift-monitor evaluation (``app.monitoring.alarms.evaluate``) in process, per batch of new
labelled rows, beside a ``--baseline`` checkout (issue #34).

State: the CIFAR-10 LeNet-5 outputs of ../shared/data (probabilities): temperature scaling fitted on
validation rows 0-2499 (version 1), a split-conformal set predictor at coverage 0.9 on rows
2500-4999 with adaptive ``dtaci`` (so a coverage alarm and an adaptive state), every served row
logged (so a label-free monitor too); then ``--rows`` test rows (shuffled, logits doubled after the
first half: a shift) served through the API with prediction ids in batches of ``--batch``, each
batch's labels posted, and the evaluation called in process after each batch (timed: the wall
seconds of ``evaluate`` alone, not the serving). A last call with nothing new is timed too.
Each tree runs in a process of its own (its ``app`` first on ``sys.path``), one after the other,
on a fresh database each (SQLite file, and Postgres with ``--postgres``).

``--profile`` prints this tree's cProfile of the evaluations (cumulative, top 30).

Run: ``git worktree add /tmp/eval-base main`` (or ``git archive main | tar -x -C /tmp/eval-base``), then
``flock /tmp/bench.lock flock /tmp/cpu.lock .venv/bin/python benchmarks/alarms_evaluate.py --baseline /tmp/eval-base
[--postgres] [--rows 4000] [--batch 250] [--repeat 3] [--profile]``; results in benchmarks/results/alarms_evaluate.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = "lenet"


def doubled(p):
    """The same model with its logits doubled: ``softmax(2 log p)``."""
    q = p.astype("float64") ** 2
    return q / q.sum(axis=1, keepdims=True)


def measure(url: str, rows: int, batch: int, profile: bool) -> dict:
    """Per-batch seconds of ``evaluate`` (and of a last call with nothing new) on a new state at ``url``."""
    import cProfile
    import logging
    import pstats
    import time

    import numpy as np
    from starlette.testclient import TestClient

    from app.main import create_app
    from app.monitoring import alarms
    from app.platform.migrate import upgrade
    from app.settings import Settings
    from tests.helpers import load_split

    _, val, val_labels = load_split("cifar10_lenet5", "val")
    _, test, test_labels = load_split("cifar10_lenet5", "test")
    upgrade(url)
    logging.disable(logging.INFO)
    app = create_app(Settings(database_url=url, max_body_bytes=64 * 1024 * 1024, job_engine="embedded"))
    profiler = cProfile.Profile() if profile else None
    times, idle = [], []
    with TestClient(app) as client:
        def ok(response, status=200):
            assert response.status_code == status, response.text
            return response.json()
        ok(client.post(f"/v1/calibrators/{NAME}/versions", json={
            "method": "temperature", "probabilities": val[:2500].tolist(), "labels": val_labels[:2500].tolist()}), 201)
        stored = ok(client.post(f"/v1/calibrators/{NAME}/versions/1/set-predictors", json={
            "score": "lac", "coverage": [0.9], "probabilities": val[2500:].tolist(),
            "labels": val_labels[2500:].tolist(), "adaptive": "dtaci"}), 201)
        ok(client.put(f"/v1/calibrators/{NAME}/logging", json={"sample_rate": 1.0}))
        service = app.state.service
        order = np.random.default_rng(34).permutation(np.resize(np.arange(len(test_labels)), rows))
        for start in range(0, rows, batch):
            picked = order[start:start + batch]
            probs = test[picked] if start < rows // 2 else doubled(test[picked])
            ids = [f"p{start + i}" for i in range(len(picked))]
            ok(client.post(f"/v1/calibrators/{NAME}/calibrate", json={
                "probabilities": probs.tolist(), "ids": ids, "outputs": ["set"], "coverage": 0.9}))
            ok(client.post(f"/v1/calibrators/{NAME}/labels", json={"ids": ids, "labels": test_labels[picked].tolist()}))
            began = time.perf_counter()
            if profiler and start:  # the first call also imports what the monitors import lazily
                profiler.enable()
            result = alarms.evaluate(service, NAME)
            if profiler:
                profiler.disable()
            times.append(time.perf_counter() - began)
        for _ in range(3):
            began = time.perf_counter()
            alarms.evaluate(service, NAME)
            idle.append(time.perf_counter() - began)
        (adaptive,) = ok(client.get(f"/v1/calibrators/{NAME}/versions/1/set-predictors/{stored['id']}"))["adaptive"]
    monitors = {f"{m['version']}/{m['signal']}": [m["n_rows"], m["log_e_value"], m["max_log_e_value"], m["ece"]]
                for m in result["monitors"]}
    monitors["adaptive"] = [adaptive["n_rows"], adaptive["level"], adaptive["observed_coverage"]]
    out = {"times": times, "idle": idle, "monitors": monitors}
    if profiler:
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(r"app/|calibration/", 40)
    return out


def run_tree(tree: Path, database: str, rows: int, batch: int, profile: bool) -> dict:
    """``measure`` in a child process whose ``app`` is ``tree``'s, on a new database of ``database``."""
    env = {"CALIBRATION_SHARED_DIR": str(REPO.parent / "shared"), **os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(tree), "--database", database,
               "--rows", str(rows), "--batch", str(batch)] + (["--profile"] if profile else [])
    done = subprocess.run(command, env=env, cwd=tree, check=True, stdout=subprocess.PIPE)
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


def child(args) -> None:
    sys.path.insert(0, args.child)
    import app

    assert Path(app.__file__).resolve().is_relative_to(Path(args.child).resolve()), app.__file__
    if args.database == "sqlite":
        with tempfile.TemporaryDirectory() as scratch:
            out = measure(f"sqlite:///{scratch}/bench.db", args.rows, args.batch, args.profile)
    else:
        from benchmarks._common import postgres_database
        with postgres_database("alarms_bench") as url:
            out = measure(url, args.rows, args.batch, args.profile)
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout, measured beside this one")
    parser.add_argument("--postgres", action="store_true", help="also on the local Postgres server")
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tree, interleaved")
    parser.add_argument("--profile", action="store_true", help="cProfile this tree's evaluations (stderr)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--database", default="sqlite", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    sys.path.insert(0, str(REPO))
    import numpy as np

    from benchmarks._common import environment, write

    trees = ([("baseline", args.baseline.resolve())] if args.baseline else []) + [("this tree", REPO)]
    databases = ["sqlite"] + (["postgres"] if args.postgres else [])
    runs: dict = {}
    for attempt in range(args.repeat):  # the trees interleaved, so that both see the same load
        for db in databases:
            for label, tree in trees:
                profile = args.profile and label == "this tree" and attempt == 0
                runs.setdefault((label, db), []).append(run_tree(tree, db, args.rows, args.batch, profile))
    header = ["database", "tree", f"ms a call with {args.batch} new rows: median", "best", "ms, nothing new: median",
              "best"]
    table = []
    for (label, db), outs in runs.items():
        # each batch's best over the repeats; the first batch left out (it imports what the monitors import lazily)
        times = np.min([out["times"][1:] for out in outs], axis=0) * 1e3
        idle = np.min([out["idle"] for out in outs], axis=0) * 1e3
        table.append([db, label, f"{np.median(times):.1f}", f"{times.min():.1f}", f"{np.median(idle):.1f}",
                      f"{idle.min():.1f}"])
    finals = {key: json.dumps(out["monitors"], sort_keys=True) for key, outs in runs.items() for out in outs}
    same = all(len({text for (_, db), text in finals.items() if db == each}) == 1
               for each in databases) if args.baseline else None
    notes = (f"{args.rows} labelled rows in batches of {args.batch}, evaluate() after each batch (wall ms, "
             f"in process), each tree run {args.repeat} times interleaved: per batch the best of the runs, then "
             "the median (and best) over batches 2 on; 'nothing new': 3 calls after the last batch, same. Monitors: "
             + ", ".join(sorted(next(iter(runs.values()))[0]["monitors"]))
             + (". Final monitors (n_rows, log e-value, max, ECE) and adaptive state (rows, level, coverage) "
                f"identical across trees and runs: {same}." if same is not None else "."))
    write("alarms_evaluate", "Drift-monitor evaluation per batch of labelled rows", header, table,
          environment(["numpy", "scipy", "sqlalchemy"]), notes)


if __name__ == "__main__":
    main()
