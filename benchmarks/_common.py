"""Timing and reporting helpers shared by the benchmark scripts."""

from __future__ import annotations

import json
import os
import platform
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
POSTGRES_ADMIN_URL = os.environ.get("CALIBRATION_TEST_POSTGRES_URL",
                                    "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@contextmanager
def postgres_database(prefix: str) -> Iterator[str]:
    """The URL of a new database ``<prefix>_<8 hex digits>`` on the local Postgres server
    (``CALIBRATION_TEST_POSTGRES_URL``), dropped on exit."""
    from sqlalchemy import create_engine, text

    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def best_of(fn, repeat: int = 5, warmup: int = 1, number: int = 1) -> float:
    """Seconds per call: the fastest of ``repeat`` timed runs of ``number`` calls each (after
    ``warmup`` untimed calls), divided by ``number``."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append(time.perf_counter() - start)
    return min(times) / number


def machine(env: dict, packages: list[str]) -> str:
    """The line a result file opens with: the CPU, its cores, Python and the versions of ``packages``
    (from ``environment``)."""
    versions = "".join(f", {package} {env[package]}" for package in packages)
    return f"Machine: {env['cpu']}, {env['cores']} cores (shared with other work); Python {env['python']}{versions}."


def save(file_name: str, lines: list[str]) -> str:
    """Write ``lines`` to ``benchmarks/results/<file_name>`` and print them; the text."""
    text = "\n".join(lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / file_name).write_text(text)
    print(text)
    return text


def environment(packages: list[str]) -> dict:
    versions = {}
    for package in packages:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    cpu = "unknown"
    if os.path.exists("/proc/cpuinfo"):
        fields = {}
        with open("/proc/cpuinfo") as info:
            for line in info:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        # the model name alone ("AMD EPYC") does not tell CPU generations apart
        avx512 = "AVX-512" if "avx512f" in fields.get("flags", "").split() else "no AVX-512"
        cpu = (f"{fields.get('model name', 'unknown')} (family {fields.get('cpu family', '?')}, "
               f"model {fields.get('model', '?')}, {avx512})")
    return {"python": platform.python_version(), "cpu": cpu, "cores": os.cpu_count(), **versions}


def write(name: str, title: str, header: list[str], rows: list[list], env: dict, notes: str = "") -> str:
    lines = [f"# {title}", "", f"Environment: {json.dumps(env)}", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    if notes:
        lines += ["", notes]
    text = "\n".join(lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(text)
    print(text)
    return text


def process_table() -> dict[int, tuple[str, int, int, float]]:
    """Every process now, from ``/proc/<pid>/stat``: pid -> (name, parent pid, start time in clock
    ticks since boot, user + system CPU seconds so far)."""
    tick, found = os.sysconf("SC_CLK_TCK"), {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            name, fields = stat[stat.find("(") + 1:stat.rfind(")")], stat[stat.rfind(")") + 2:].split()
            found[int(entry)] = (name, int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / tick)
    return found


def cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and its live descendants (``/proc``)."""
    table = process_table()
    tree, grew = {root}, True
    while grew:
        found = {pid for pid, (_, parent, _, _) in table.items() if parent in tree} - tree
        tree |= found
        grew = bool(found)
    return sum(table[pid][3] for pid in tree if pid in table)
