"""What one client id costs Postgres when the prediction log's writer inserts it: the writer's statement
(``app/prediction_log/store.py`` ``log_predictions``: ``INSERT ... SELECT ... FROM unnest(%s::text[])
WITH ORDINALITY ... ORDER BY id, ord ON CONFLICT (calibrator_id, epoch_id, prediction_id) DO NOTHING``)
into a table shaped as ``logged_predictions`` (primary key ``(calibrator_id, epoch_id, prediction_id)``,
an index on ``chunk_id``), with its two foreign keys of before migration 0019 (to the calibrator and to
the chunk: Postgres checks each inserted row against each parent in a trigger of its own), with the
one to the chunk only (since 0019), that with the writer's ``NOT EXISTS`` and ``DISTINCT ON`` in place of
``ON CONFLICT`` (its statement since), with neither key, without the chunk index, and without ``ON CONFLICT``.
Each commit writes one chunk row and ``--ids`` random ids (a flush of ~330 requests of 64 ids:
``CALIBRATION_LOG_FLUSH_BYTES``), in epochs of 65536 ids, ``--flushes`` commits a variant, the variants
in turn for ``--rounds`` rounds.

Reported: µs of wall time an id (the backend's work; the client sends one array a statement), per
round. A new database on the local server (``CALIBRATION_TEST_POSTGRES_URL``), dropped afterwards.

Run: ``python benchmarks/id_insert_postgres.py [--flushes 12 --ids 21000 --rounds 2]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import environment, postgres_database, write

# (label, foreign keys: both, "chunk" (the one to the chunk only: migration 0019) or none, chunk index,
# ON CONFLICT: True, False or "not exists" (the writer's statement on Postgres))
VARIANTS = (("as logged_predictions before 0019 (both foreign keys, chunk index, ON CONFLICT)", True, True, True),
            ("as since 0019 (the foreign key to the chunk only)", "chunk", True, True),
            ("as since 0019, the writer's NOT EXISTS and DISTINCT ON instead of ON CONFLICT", "chunk", True,
             "not exists"),
            ("without the two foreign keys", False, True, True),
            ("without the chunk index", True, False, True),
            ("without ON CONFLICT", True, True, False),
            ("none of the three", False, False, False))


def create(connection: psycopg.Connection, foreign_keys: bool | str, chunk_index: bool) -> None:
    connection.execute("DROP TABLE IF EXISTS ids; DROP TABLE IF EXISTS chunks; DROP TABLE IF EXISTS calibrators")
    connection.execute("CREATE TABLE calibrators (id serial PRIMARY KEY)")
    connection.execute("INSERT INTO calibrators DEFAULT VALUES")
    connection.execute("CREATE TABLE chunks (id serial PRIMARY KEY, calibrator_id int REFERENCES calibrators(id) "
                       "ON DELETE CASCADE, inputs bytea)")
    to_calibrator = "REFERENCES calibrators(id) ON DELETE CASCADE" if foreign_keys is True else ""
    to_chunk = "REFERENCES chunks(id) ON DELETE CASCADE" if foreign_keys else ""
    connection.execute(
        f"CREATE TABLE ids (calibrator_id int NOT NULL {to_calibrator}, epoch_id int NOT NULL, prediction_id "
        f"varchar(128) NOT NULL, chunk_id int NOT NULL {to_chunk}, row int NOT NULL, labelled bool NOT NULL, "
        "n_rows int NOT NULL DEFAULT 1, kept bytea, PRIMARY KEY (calibrator_id, epoch_id, prediction_id))")
    if chunk_index:
        connection.execute("CREATE INDEX ix_ids_chunk_id ON ids (chunk_id)")
    connection.commit()


def per_id(connection: psycopg.Connection, variant: tuple, flushes: int, n: int, seed: int) -> float:
    """µs of wall time an id over ``flushes`` commits of ``n`` random ids."""
    _, foreign_keys, chunk_index, conflict = variant
    create(connection, foreign_keys, chunk_index)
    rng = random.Random(seed)
    on_conflict = " ON CONFLICT (calibrator_id, epoch_id, prediction_id) DO NOTHING" if conflict is True else ""
    rows = ("(SELECT DISTINCT ON (u.id) u.id, u.ord FROM unnest(%s::text[]) WITH ORDINALITY AS u(id, ord) "
            "ORDER BY u.id, u.ord) AS u WHERE NOT EXISTS (SELECT 1 FROM ids AS l WHERE l.calibrator_id = 1 AND "
            "l.epoch_id = %s AND l.prediction_id = u.id) ORDER BY u.id" if conflict == "not exists" else
            "unnest(%s::text[]) WITH ORDINALITY AS u(id, ord) ORDER BY u.id, u.ord")
    total = 0.0
    for flush in range(flushes):
        ids = [f"{rng.getrandbits(128):032x}" for _ in range(n)]
        start = time.perf_counter()
        chunk = connection.execute("INSERT INTO chunks (calibrator_id, inputs) VALUES (1, %s) RETURNING id",
                                   (b"\0" * 64,)).fetchone()[0]
        epoch = flush * n // 65536
        connection.execute("INSERT INTO ids SELECT %s, %s, u.id, %s, u.ord - 1, false, 1, NULL FROM " + rows
                           + on_conflict, (1, epoch, chunk, ids, *((epoch,) if conflict == "not exists" else ())))
        connection.commit()
        total += time.perf_counter() - start
    return 1e6 * total / (flushes * n)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flushes", type=int, default=12)
    parser.add_argument("--ids", type=int, default=21000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    costs: dict[str, list[float]] = {label: [] for label, *_ in VARIANTS}
    with postgres_database("bench_id_insert") as url, psycopg.connect(
            url.replace("postgresql+psycopg://", "postgresql://")) as connection:
        for round_ in range(args.rounds):
            for variant in VARIANTS:
                costs[variant[0]].append(per_id(connection, variant, args.flushes, args.ids, round_))
                print(variant[0], f"{costs[variant[0]][-1]:.2f}", flush=True)
        server = connection.execute("SHOW server_version").fetchone()[0]
    rows = [[label, *(f"{cost:.2f}" for cost in values)] for label, values in costs.items()]
    write("id_insert_postgres", f"Postgres {server}: µs an id of the prediction log's id insert, {args.flushes} "
          f"commits of {args.ids} random ids a variant",
          ["table", *(f"round {i + 1}" for i in range(args.rounds))], rows, environment(["psycopg"]),
          f"Load average {os.getloadavg()[0]:.1f} at the end.")


if __name__ == "__main__":
    main()
