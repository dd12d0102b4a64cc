"""The install step of `make test` and the image (`scripts/install`) against another checkout's, in
one run: each round creates a fresh venv with this tree's script and with the baseline's, one after
the other (the order alternating), and times the whole step (wall seconds, and user + system CPU
seconds of its process tree). Medians over ``--rounds``.

The baseline is a ``scripts/install`` from another revision, e.g. the pip-only one of 7304f68:

    git show 7304f68:scripts/install > /tmp/install-pip && chmod +x /tmp/install-pip
    python benchmarks/install_step.py --baseline /tmp/install-pip --rounds 3

Both install this tree (the baseline script runs with this checkout as its working directory), so
they resolve the same requirements from the same indexes; a package cache is used by neither.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import environment, write  # noqa: E402

EXTRAS = "dev,plot,postgres,torch,client,docs"  # the Makefile's TEST_EXTRAS


def timed_install(script: Path, mode: str) -> tuple[float, float]:
    """Wall and CPU seconds of ``script VENV EXTRAS [editable]`` into a new folder."""
    with tempfile.TemporaryDirectory() as scratch:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        subprocess.run([str(script), f"{scratch}/venv", EXTRAS, *([mode] if mode else [])], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="another revision's scripts/install")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", default="editable", help="'editable' (make test) or '' (the image)")
    options = parser.parse_args()
    scripts = {"baseline": options.baseline.resolve(), "this tree": REPO / "scripts" / "install"}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in scripts}
    for round_number in range(options.rounds):
        order = list(scripts) if round_number % 2 == 0 else list(reversed(scripts))
        for name in order:
            times[name].append(timed_install(scripts[name], options.mode))
            print(f"round {round_number + 1} {name}: {times[name][-1][0]:.1f} s wall, {times[name][-1][1]:.1f} CPU-s",
                  flush=True)
    base_wall = statistics.median(wall for wall, _ in times["baseline"])
    rows = [[name, f"{statistics.median(w for w, _ in runs):.1f}", f"{statistics.median(c for _, c in runs):.1f}",
             f"{min(w for w, _ in runs):.1f}–{max(w for w, _ in runs):.1f}",
             f"{statistics.median(w for w, _ in runs) / base_wall:.2f}"] for name, runs in times.items()]
    write("install_step", f"scripts/install {options.mode or '(image)'} {EXTRAS}: a fresh venv, "
                          f"median of {options.rounds} interleaved rounds",
          ["install step", "wall s", "CPU-s", "wall range", "wall ÷ baseline"], rows, environment(["pip"]),
          notes=f"baseline: {options.baseline}")


if __name__ == "__main__":
    main()
