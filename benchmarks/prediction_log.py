"""What the prediction log costs the hot path: binary calibrate throughput with logging off, on at
10% and on at 100% of rows (ratios against off), what share of the served rows the log wrote,
and the append throughput of observations.

One server (``calibration-service serve``, 1 worker, SQLite in a temporary directory, the
scheduler off: its drift-monitor jobs on the logged rows belong to the alarms feature), a
temperature-scaling calibrator, ``.npy`` batches of 64 x ``--classes`` float32 logits, ``wrk``
with 32 connections for ``--seconds`` per run. The settings alternate (``PUT .../logging``
between runs) for ``--rounds`` rounds: off, 10% and 100% with generated ids (the service names
the rows; a batch of them is one index row), and off and 100% with 64 fresh client ids a request
(the ``Prediction-Ids`` header; one index row per id), in the order they are served
(``<start>.<request>.<row>``) or random (UUID 4, what a service's request ids often are: each a
random key in the id index's B-tree). Medians and each round's ratio to its run with logging off
and the same requests (median and range) are reported (100% with client ids also against off
without them: what the ids cost with their parsing and checks), and the server's CPU time per
request (all its threads and its log writer process, from /proc, split into the event loop's
thread, the log's writer, named ``prediction-log``: the writer process, or the thread with
``CALIBRATION_LOG_WRITER=thread``, and the others: the hot path's pool threads, which run the
calibrate calls it moves off the loop, so "others" is not the log's cost; its ratio off/on is
the throughput ratio once the cores are the bound, and steadier than req/s on a shared machine).
Each run's CPU time runs on until the log's writer has caught up (at 100%, the logged count up
by every served row; then still for 1.5 s; ``SETTLE_SECONDS`` at most), and the rows it logged
(from the observation summary) are divided by the rows served: below 1 where the writer fell
behind and the ring dropped batches.
A second server, whose log a thread writes (the baseline, what the log was before its writer
process), runs off and 100% in the same rounds, and a third, whose writer process keeps SQLite's
own 2 MiB page cache (``CALIBRATION_LOG_WRITER_CACHE_BYTES=0``, the baseline of that setting),
and a fourth, whose writer closes its id index's epochs after 16384 ids instead of 65536
(``CALIBRATION_LOG_EPOCH_IDS``), off and 100% with random client ids. The append figure is rows per second of ``POST
.../observations`` with 10000 x ``--classes`` float32 ``.npz`` chunks, sent one after another.

``--baseline DIR`` adds a server of another checkout of this project (its ``app``, started from
``DIR``: e.g. ``git worktree add /tmp/old main``) that runs the default writer's settings in the
same rounds, each right after this code's run of the same setting: before/after figures of one run.
Its migrations are this checkout's (the editable install maps ``app.migrations`` here) unless
``DIR/app/migrations`` links to its own (``ln -s DIR/migrations DIR/app/migrations``): needed where
the two checkouts' schemas differ, or the baseline's server finds its database ahead of it.
``--database postgres`` runs every server on a new database of the local Postgres server
(``CALIBRATION_TEST_POSTGRES_URL``) instead of SQLite. ``--skip 10%,random`` leaves out the
settings whose label holds one of those words. The results file keeps the runs before below the
new one.

Run: ``python benchmarks/prediction_log.py [--seconds 6 --rounds 3 --classes 100 --servers
process,thread,default cache,small epochs --baseline DIR --database sqlite --skip ...]``
(``--servers process``: the default writer's rows alone).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import RESULTS, environment, postgres_database, write  # noqa: E402
from benchmarks.service_latency import ALLOCATOR, run_wrk  # noqa: E402
from tests.service.support.live import LiveServer  # noqa: E402

# (label, sampling rate, client ids per request: None for generated ids, who writes the log, the
# run with logging off that its ratios are to: the same server and the same requests, in the same
# round). A request's client ids are parsed and checked with logging off too (``log_served``), so
# "100%, client ids" is compared with "0%, client ids"; its ratio to plain "0%" is also reported
SETTINGS = (("0%", 0.0, None, "process", "0%"), ("10%", 0.1, None, "process", "0%"),
            ("100%", 1.0, None, "process", "0%"), ("0%, client ids", 0.0, 64, "process", "0%"),
            ("100%, client ids", 1.0, 64, "process", "0%, client ids"),
            ("0%, random client ids", 0.0, "64 random", "process", "0%, random client ids"),
            ("100%, random client ids", 1.0, "64 random", "process", "0%, random client ids"),
            ("0%, random client ids, 2 MiB cache", 0.0, "64 random", "default cache",
             "0%, random client ids, 2 MiB cache"),
            ("100%, random client ids, 2 MiB cache", 1.0, "64 random", "default cache",
             "0%, random client ids, 2 MiB cache"),
            ("0%, random client ids, epochs of 16384", 0.0, "64 random", "small epochs",
             "0%, random client ids, epochs of 16384"),
            ("100%, random client ids, epochs of 16384", 1.0, "64 random", "small epochs",
             "0%, random client ids, epochs of 16384"),
            ("0%, thread writer", 0.0, None, "thread", "0%, thread writer"),
            ("100%, thread writer", 1.0, None, "thread", "0%, thread writer"))
# the servers: the writer a process (with CALIBRATION_LOG_WRITER_CACHE_BYTES's and _EPOCH_IDS's
# defaults), a thread (the baseline of the writer process), a process with SQLite's own 2 MiB page
# cache (the baseline of that setting), or with epochs of 16384 ids instead of 65536 (a random id
# dirties a page of the open epoch: fewer pages a commit, 4 times as many epochs for a label to probe)
SERVERS = {"process": {"CALIBRATION_LOG_WRITER": "process"}, "thread": {"CALIBRATION_LOG_WRITER": "thread"},
           "default cache": {"CALIBRATION_LOG_WRITER": "process", "CALIBRATION_LOG_WRITER_CACHE_BYTES": "0"},
           "small epochs": {"CALIBRATION_LOG_WRITER": "process", "CALIBRATION_LOG_EPOCH_IDS": "16384"}}
BASELINE = "baseline"  # the server of ``--baseline``: the default writer ("process") of another checkout
SETTLE_SECONDS = 60.0  # the most a run waits for its log's writer to catch up


def logged_rows(client: httpx.Client) -> int:
    return client.get("/v1/calibrators/bench/observations").json()["prediction_log"]["logged"]


def settled(client: httpx.Client, at_least: int = 0) -> None:
    """Wait until the log's writer has written what it was handed: the logged count at least
    ``at_least`` (a run at 100%: every served row), then still for 1.5 s (flush_seconds 1),
    ``SETTLE_SECONDS`` at most. The count alone being still is not enough where one write takes
    longer than that (Postgres with client ids: a flush of ~21000 ids): the run's rows were then
    counted in the next run's time."""
    deadline, last = time.monotonic() + SETTLE_SECONDS, -1
    while time.monotonic() < deadline:
        time.sleep(0.25 if last < at_least else 1.5)
        now = logged_rows(client)
        if now == last and now >= at_least:
            return
        last = now


def wrk_env(client_ids) -> dict | None:
    """``CLIENT_IDS`` (and ``RANDOM_IDS``) for ``benchmarks/wrk_post.lua``."""
    if client_ids is None:
        return None
    count, *random = str(client_ids).split()
    return {"CLIENT_IDS": count, "RANDOM_IDS": "1" if random else "0"}


def _stat_seconds(path: str) -> float:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process (all its threads) so far."""
    return _stat_seconds(f"/proc/{pid}/stat")


def thread_seconds(pid: int) -> dict[int, float]:
    """CPU time of each thread of a process so far."""
    seconds = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):  # the thread ended
            seconds[int(tid)] = _stat_seconds(f"/proc/{pid}/task/{tid}/stat")
    return seconds


def writer_threads(pid: int) -> set[int]:
    """The log's writer thread(s): named ``prediction-log`` for the OS (``app.prediction_log.service.name_thread``)."""
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            if Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() == "prediction-log":
                found.add(int(tid))
    return found


def writer_processes(pid: int) -> dict[int, float]:
    """CPU time so far of the log's writer process(es), children of ``pid`` named ``prediction-log``
    (``app.prediction_log.pipe``)."""
    seconds = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                name, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()
                if name == "prediction-log" and int(fields[1]) == pid:
                    seconds[int(entry)] = _stat_seconds(f"/proc/{entry}/stat")
    return seconds


def measured(pid: int, *wrk_args, env: dict | None = None, settle=lambda result: time.sleep(1.5)) -> dict:
    """A wrk run, with the server's CPU time per request over it and until ``settle(wrk's result)``
    returns, when the log has written the run's last rows (flush_seconds 1): in all, on the event loop's thread (the
    process's main thread: requests, and the sampling into the log's buffer), on the log's writer
    and on the others (the hot path's pool threads, which run calibrate calls that the hot path
    moved off the loop: ``app/http/hot_path.py``)."""
    before, threads, processes = cpu_seconds(pid), thread_seconds(pid), writer_processes(pid)
    result = run_wrk(*wrk_args, env=env)
    settle(result)
    after, processes_after = thread_seconds(pid), writer_processes(pid)
    main = after.get(pid, 0.0) - threads.get(pid, 0.0)
    process = sum(seconds - processes.get(child, 0.0) for child, seconds in processes_after.items())
    writer = process + sum(after[tid] - threads.get(tid, 0.0) for tid in writer_threads(pid) if tid in after)
    n = max(result["requests"], 1)
    total = cpu_seconds(pid) - before + process
    return {**result, "cpu_us": 1e6 * total / n, "main_us": 1e6 * main / n, "writer_us": 1e6 * writer / n,
            "other_us": 1e6 * (total - main - writer) / n}


def with_baseline(settings, servers: dict) -> tuple[list, dict]:
    """The settings and servers with ``BASELINE``'s: each setting of the default writer again on the
    baseline's server, labelled ``..., baseline`` (its ratios to its own runs with logging off)."""
    extended = []
    for label, rate, client_ids, server_name, off in settings:
        extended.append((label, rate, client_ids, server_name, off))
        if server_name == "process":
            extended.append((f"{label}, {BASELINE}", rate, client_ids, BASELINE, f"{off}, {BASELINE}"))
    return extended, {**servers, BASELINE: servers["process"]}


def kept_history(name: str) -> str:
    """The results file's text so far, its title a section's: what the new run keeps below its own."""
    path = RESULTS / f"{name}.md"
    if not path.exists():
        return ""
    text = path.read_text()
    return "\n## The run before: " + text[2:] if text.startswith("# ") else "\n" + text


def _fitted_server(database_url: str, directory: str, server_name: str, fit_logits, fit_labels,
                   baseline: str | None = None) -> tuple[LiveServer, httpx.Client, str]:
    # the scheduler's drift-monitor jobs (every 60 s, on the rows logged since) are the alarms
    # feature's cost, not the log's: they landed in one run or another and swamped the ratios
    file = server_name.replace(" ", "-")
    # the baseline's ``python -m app.cli`` imports the ``app`` of its working directory (``env -C``)
    prefix = ["env", "-C", baseline] if server_name == BASELINE and baseline else None
    server = LiveServer(database_url, log_file=f"{directory}/{file}.log", command_prefix=prefix, env={
        **ALLOCATOR, "CALIBRATION_SCHEDULE_SECONDS": "0", **SERVERS[server_name]})
    base = server.start()
    client = httpx.Client(base_url=base, timeout=120)
    fitted = client.post("/v1/calibrators/bench/versions", json={
        "method": "temperature", "logits": fit_logits.tolist(), "labels": fit_labels.tolist()})
    assert fitted.status_code == 201, fitted.text
    return server, client, f"{base}/v1/calibrators/bench/calibrate"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--servers", default=",".join(SERVERS),
                        help=f"comma-separated, of {', '.join(SERVERS)}: the servers (and their settings) to run")
    parser.add_argument("--baseline", help="a checkout of this project whose server runs the default writer's "
                        "settings beside this code's, in the same rounds")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--skip", default="", help="comma-separated words: settings whose label holds one are left out")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    k = args.classes
    chosen = args.servers.split(",")
    skipped = [word for word in args.skip.split(",") if word]
    settings = [setting for setting in SETTINGS if setting[3] in chosen
                and not any(word in setting[0] for word in skipped)]
    if args.baseline:
        settings, servers_settings = with_baseline(settings, SERVERS)
        SERVERS.update(servers_settings)
        chosen = [*chosen, BASELINE]
    fit_logits = rng.standard_normal((2000, k)) * 3
    fit_labels = rng.integers(0, k, 2000)
    batch = rng.standard_normal((64, k)).astype(np.float32)
    history = kept_history("prediction_log")
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as databases:
        body = Path(directory) / "batch.npy"
        np.save(body, batch)

        def database_url(name: str) -> str:
            if args.database == "postgres":
                return databases.enter_context(postgres_database("bench_prediction_log"))
            return f"sqlite:///{directory}/{name.replace(' ', '-')}.db"

        servers = {name: _fitted_server(database_url(name), directory, name, fit_logits, fit_labels, args.baseline)
                   for name in chosen}
        try:
            results: dict[str, list[dict]] = {label: [] for label, *_ in settings}
            for _, _, url in servers.values():  # warm-up
                run_wrk(url, body, "application/x-npy", "application/x-npy", 2)
            for _ in range(args.rounds):
                for label, rate, client_ids, server_name, _ in settings:
                    server, client, url = servers[server_name]
                    client.put("/v1/calibrators/bench/logging", json={"sample_rate": rate})
                    before = logged_rows(client)
                    results[label].append(measured(
                        server.process.pid, url, body, "application/x-npy", "application/x-npy", args.seconds,
                        env=wrk_env(client_ids), settle=lambda result, client=client, before=before, rate=rate: settled(
                            client, before + 64 * result["requests"] if rate >= 1 else 0)))
                    run = results[label][-1]
                    run["logged"] = (logged_rows(client) - before) / (64 * run["requests"])
            time.sleep(2)  # the log's last flush
            client = servers[chosen[0]][1]
            summary = client.get("/v1/calibrators/bench/observations").json()

            chunk = 10000
            appends = [io.BytesIO() for _ in range(5)]
            for buffer in appends:
                np.savez(buffer, logits=rng.standard_normal((chunk, k)).astype(np.float32),
                         labels=rng.integers(0, k, chunk))
            start = time.perf_counter()
            for buffer in appends:
                response = client.post("/v1/calibrators/appends/observations", content=buffer.getvalue(),
                                       headers={"content-type": "application/x-npz"})
                assert response.status_code == 201, response.text
            append_rate = 5 * chunk / (time.perf_counter() - start)
        finally:
            for server, _, _ in servers.values():
                server.stop()
    rows = []
    # and the client ids' whole cost against requests without them: their parsing and checks as well
    comparisons = [(label, baseline) for label, *_, baseline in settings]
    comparisons += [("100%, client ids", "0%")] if "100%, client ids" in results and "0%" in results else []
    for label, baseline in comparisons:
        runs, off = results[label], results[baseline]
        rps = [r["rps"] for r in runs]
        # each round's ratio to the same round's run with logging off (the runs alternate)
        ratios = sorted(r["rps"] / o["rps"] for r, o in zip(runs, off, strict=True))
        # and the server's CPU per request: what throughput is once the cores are the bound
        cpu_ratios = sorted(o["cpu_us"] / r["cpu_us"] for r, o in zip(runs, off, strict=True))
        rows.append([f"{label} (vs {baseline})" if label != baseline else label,
                     f"{statistics.median(rps):.0f} ({min(rps):.0f}-{max(rps):.0f})",
                     f"{statistics.median(ratios):.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})",
                     f"{statistics.median(r['cpu_us'] for r in runs):.0f} "
                     f"({statistics.median(r['main_us'] for r in runs):.0f} + "
                     f"{statistics.median(r['writer_us'] for r in runs):.0f} + "
                     f"{statistics.median(r['other_us'] for r in runs):.0f})",
                     f"{statistics.median(cpu_ratios):.3f} ({cpu_ratios[0]:.3f}-{cpu_ratios[-1]:.3f})",
                     f"{statistics.median(r['logged'] for r in runs):.3f} ({min(r['logged'] for r in runs):.3f})",
                     f"{statistics.median(r['p50'] for r in runs):.2f}",
                     f"{statistics.median(r['p99'] for r in runs):.2f}",
                     sum(r["errors"] for r in runs)])
    rows.append(["append (observations)", f"{append_rate:,.0f} rows/s", "-", "-", "-", "-", "-", "-", 0])
    database = "SQLite" if args.database == "sqlite" else "Postgres"
    against = f"; `baseline`: the server of {args.baseline}" if args.baseline else ""
    text = write("prediction_log", f"Binary calibrate, 64 x {k} float32, with the prediction log off / 10% / 100% "
          f"(wrk -c32, {args.seconds} s x {args.rounds} rounds, 1 worker, {database}; the writer a process, or a "
          f"thread{against})",
          ["logging", "req/s median (range)", "ratio to off, median of rounds (range)",
           "server CPU us/request (event loop + log writer + other threads)",
           "CPU ratio off/on, median of rounds (range)", "rows logged / served, median (lowest)",
           "p50 ms", "p99 ms", "non-2xx"], rows,
          environment(["numpy", "fastapi", "uvicorn", "sqlalchemy"]),
          f"Rows the writer process wrote over all runs: {summary['prediction_log']['logged']}; append chunks of "
          f"{chunk} x {k} float32 .npz. Client and server share the machine's 2 cores "
          f"(load average {os.getloadavg()[0]:.1f} at the end); the ratios of interleaved rounds are the "
          "comparable figure.")
    (RESULTS / "prediction_log.md").write_text(text + history)


if __name__ == "__main__":
    main()
