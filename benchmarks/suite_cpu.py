"""Where the cores go while a test command runs (by default the whole suite, ``python -m pytest``):
the machine's idle, iowait and busy core-seconds over the run (``/proc/stat``), the command's own
process tree (its reaped descendants, ``RUSAGE_CHILDREN``), the Postgres server's backends (the
postmaster's reaped children, ``/proc/<postmaster>/stat``, as in ``postgres_test_databases.py``)
and, sampled from ``/proc`` every ``--interval`` seconds, each process's CPU by kind (test worker,
server, worker, job-pool child, Chromium, ...; a process that lives less than one interval is not
seen). Busy core-seconds minus the tree and the backends is what other processes used: ones the
tree did not reap, and anything else on the machine. With the cores saturated (idle near 0), a
test that sleeps or polls costs the run no wall time: another process uses the core; only CPU
taken out, or idle at the start and the end, shortens it."""

from __future__ import annotations

import argparse
import collections
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import environment, machine, process_table, save  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cores() -> dict:
    """The machine's core-seconds so far by state (``/proc/stat``'s first line)."""
    user, nice, system, idle, iowait, irq, softirq, steal = (
        int(value) / TICK for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9])
    return {"busy": user + nice + system + irq + softirq, "idle": idle, "iowait": iowait, "steal": steal}


def processes() -> dict:
    """Every process now: (pid, start time) -> (name, parent, CPU seconds so far)."""
    return {(pid, start): (name, parent, cpu) for pid, (name, parent, start, cpu) in process_table().items()}


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def kind(name: str, line: str) -> str:
    """A process's kind, from its name and command line."""
    rules = [("app.cli serve", "server (app.cli serve)"), ("app.cli worker", "worker (app.cli worker)"),
             ("app.prediction_log.process", "prediction log writer"),
             ("multiprocessing.resource_tracker", "multiprocessing resource tracker"),
             ("multiprocessing", "job-pool / multiprocessing child"),
             ("exec(eval(sys.stdin", "pytest-xdist worker"), ("pytest", "pytest"),
             ("schemathesis", "schemathesis"), ("playwright", "playwright driver"),
             ("bin/calibration", "calibration CLI")]
    if name == "postgres":
        return "postgres (sampled)"
    if "chrom" in name or "chrom" in line:
        return "chromium"
    for needle, label in rules:
        if needle in line:
            return label
    return name


def postmaster() -> int | None:
    """The oldest ``postgres`` process: the server's postmaster, when it runs on this machine."""
    found = [(start, pid) for (pid, start), (name, _, _) in processes().items() if name == "postgres"]
    return min(found)[1] if found else None


def reaped(pid: int | None) -> float:
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / TICK


class Sampler(threading.Thread):
    """Each process's CPU by kind: the last value seen minus the value at the start."""

    def __init__(self, interval: float):
        super().__init__(daemon=True)
        self.interval, self.stopped = interval, threading.Event()
        self.first = {key: cpu for key, (_, _, cpu) in processes().items()}
        self.last: dict = {}
        self.kinds: dict = {}
        self.states = [(time.monotonic(), cores())]  # the machine's core-seconds at each sample

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.scan()

    def scan(self) -> None:
        self.states.append((time.monotonic(), cores()))
        for key, (name, _, cpu) in processes().items():
            self.last[key] = cpu
            if key not in self.kinds:
                self.kinds[key] = kind(name, command_line(key[0]))

    def idle_by_tenth(self) -> list[float]:
        """The cores' idle share (idle + iowait) in each tenth of the run: each interval between two
        samples counts in the tenth that holds its middle."""
        begin, end = self.states[0][0], self.states[-1][0]
        idle, every = [0.0] * 10, [0.0] * 10
        for (before, was), (after, now) in zip(self.states, self.states[1:], strict=False):
            tenth = min(int(10 * ((before + after) / 2 - begin) / max(end - begin, 1e-9)), 9)
            idle[tenth] += now["idle"] - was["idle"] + now["iowait"] - was["iowait"]
            every[tenth] += sum(now.values()) - sum(was.values())
        return [share / total if total else float("nan") for share, total in zip(idle, every, strict=True)]

    def by_kind(self) -> dict:
        totals, counts = collections.Counter(), collections.Counter()
        for key, cpu in self.last.items():
            used = cpu - self.first.get(key, 0.0)
            if used > 0:
                totals[self.kinds[key]] += used
                counts[self.kinds[key]] += 1
        return {label: (totals[label], counts[label]) for label, _ in totals.most_common()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.25, help="sampling interval, seconds")
    parser.add_argument("--name", default="suite_cpu.md", help="the result file in benchmarks/results/")
    parser.add_argument("command", nargs="*", help="the command (default: python -m pytest); put it after --")
    arguments = parser.parse_args()
    command = arguments.command or [sys.executable, "-m", "pytest"]
    postgres = postmaster()
    sampler = Sampler(arguments.interval)
    before, backends, tree = cores(), reaped(postgres), resource.getrusage(resource.RUSAGE_CHILDREN)
    sampler.start()
    start = time.monotonic()
    code = subprocess.call(command, cwd=REPO)
    wall = time.monotonic() - start
    sampler.stopped.set()
    sampler.join()
    sampler.scan()
    after, backends = cores(), reaped(postgres) - backends
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (usage.ru_utime - tree.ru_utime) + (usage.ru_stime - tree.ru_stime)
    spent = {state: after[state] - before[state] for state in before}
    total = sum(spent.values())
    env = environment([])
    lines = ["# Where the cores go during a test run", "",
             f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, "
             f"`{' '.join(arguments.command) or 'python -m pytest'}` (exit {code}): {wall:.1f} s wall, "
             f"{total:.0f} core-seconds on the machine.", "",
             "| core-seconds | s | share |", "|---|---|---|"]
    lines += [f"| {state} | {spent[state]:.1f} | {100 * spent[state] / total:.1f}% |" for state in spent]
    lines += ["", "idle + iowait share in each tenth of the run: "
              + ", ".join(f"{100 * share:.0f}%" for share in sampler.idle_by_tenth())]
    lines += ["", "| busy core-seconds by whom | CPU s |", "|---|---|",
              f"| the command's process tree (reaped descendants) | {own:.1f} |",
              f"| Postgres backends (the postmaster's reaped children) | {backends:.1f} |",
              f"| the rest (unreaped processes, other work on the machine) | {spent['busy'] - own - backends:.1f} |",
              "", f"| sampled every {arguments.interval} s, by kind | CPU s | processes |", "|---|---|---|"]
    lines += [f"| {label} | {used:.1f} | {count} |" for label, (used, count) in sampler.by_kind().items()
              if used >= 0.5]
    lines += ["", machine(env, [])]
    save(arguments.name, lines)
    sys.exit(code)


if __name__ == "__main__":
    main()
