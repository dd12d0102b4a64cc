"""The Postgres server's CPU for one test's migrated database: a new copy of the migrated template
(``CREATE DATABASE ... TEMPLATE``, and ``DROP DATABASE`` after the test), against the test process's
copy emptied and renamed (``MigratedPostgres.give_back`` and ``take``, tests/service/support/databases.py),
both after the same test's writes (a fit through the app). Server CPU: the user + system seconds of the
backends that ended in the window (the postmaster's reaped children, ``/proc/<postmaster>/stat``) and
of the admin connection's backend, which lives on; so the server must run on this machine
(``--postmaster PID``, default the oldest ``postgres`` process). Interleaved rounds, medians."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import text

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import environment, machine, save  # noqa: E402
from tests.service.support.clients import app_client  # noqa: E402
from tests.service.support.databases import (  # noqa: E402
    MigratedPostgres,
    admin_engine,
    create_postgres_database,
    database_url,
    drop_postgres_database,
    new_name,
)
from tests.service.support.fits import fit  # noqa: E402


def cpu(pid: int, *, reaped: bool) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    first = 13 if reaped else 11  # cutime, cstime (the children that ended) or utime, stime
    return (int(fields[first]) + int(fields[first + 1])) / 100


def written(url: str) -> None:
    """What a test leaves: two versions of a calibrator and an alias."""
    with app_client(url) as client:
        fit(client)
        fit(client)
        client.put("/v1/calibrators/demo/aliases/production", json={"version": 1})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--per-round", type=int, default=4)
    parser.add_argument("--postmaster", type=int,
                        default=int(subprocess.check_output(["pgrep", "-o", "-x", "postgres"]).split()[0]))
    args = parser.parse_args()
    from app.platform.migrate import upgrade

    head, drop_head = create_postgres_database()
    upgrade(head)
    template = head.rsplit("/", 1)[1]
    copies = MigratedPostgres(head)
    with admin_engine().connect() as connection:
        admin = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()

    def server() -> float:
        return cpu(args.postmaster, reaped=True) + cpu(admin, reaped=False)

    def new_copy() -> float:
        name = new_name()
        with admin_engine().connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
        written(database_url(name))
        time.sleep(0.3)
        before = server()
        drop_postgres_database(name)  # this test's drop, and the next test's copy
        name = new_name()
        with admin_engine().connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
        time.sleep(0.3)
        spent = server() - before
        drop_postgres_database(name)
        return spent

    def emptied() -> float:
        url = copies.take()
        written(url)
        time.sleep(0.3)
        before = server()
        copies.give_back(url)  # this test's database emptied, and the next test's
        following = copies.take()
        time.sleep(0.3)
        spent = server() - before
        copies.give_back(following)
        return spent

    runs: dict[str, list[float]] = {"new copy (create + drop)": [], "emptied copy (give back + take)": []}
    try:
        for _ in range(args.rounds):
            for label, step in zip(runs, (new_copy, emptied), strict=True):
                runs[label].append(statistics.median(step() for _ in range(args.per_round)))
    finally:
        copies.close()
        drop_head()
    env = environment(["psycopg", "sqlalchemy"])
    base = statistics.median(runs["new copy (create + drop)"])
    lines = ["# The Postgres server's CPU for one test's migrated database", "",
             machine(env, ["psycopg", "sqlalchemy"]), "",
             f"{args.rounds} interleaved rounds of {args.per_round} tests each; server CPU ms a test "
             "(backends' user + system), median of the rounds' medians [range].", "",
             "| database of a test | server CPU ms | ratio |", "|---|---|---|"]
    for label, values in runs.items():
        lines.append(f"| {label} | {statistics.median(values) * 1000:.0f} "
                     f"[{min(values) * 1000:.0f}, {max(values) * 1000:.0f}] | "
                     f"{statistics.median(values) / base:.2f} |")
    save("postgres_test_databases.md", lines)


if __name__ == "__main__":
    main()
