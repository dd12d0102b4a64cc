"""Conformal sets on drifting streams of real model outputs: split conformal against ACI and DtACI
(``calibration.conformal``), and the coverage alarm (``calibration.CoverageAlarm``) on the split-conformal
sets, with the shifts the drift monitor is tested on (``benchmarks/drift_alarms.py``).

For each data set a temperature scaling is fitted on the validation split; its probabilities on the
validation split are the conformal calibration rows (score ``SCORE``, level ``ALPHA``). A stream draws
test rows with replacement: ``BEFORE`` rows unshifted, then ``AFTER`` shifted rows: temperature changes
of the logits (``logits * 2`` and ``logits * 0.5``, served through the same calibrator), a tweak-one
prior shift (one random class gets prior 0.9) and a class swap (the labels of 3 random disjoint class
pairs exchanged). Per stream: coverage over the whole stream and after the shift of the fixed split-
conformal sets, of ACI (``gamma = GAMMA`` and ``FAST_GAMMA``) and of DtACI (the paper's defaults), and
the mean set size; the table gives the mean over streams with a 95% interval (1.96 standard errors of
the stream means). The alarm: ``alpha + tolerance`` with tolerance ``TOLERANCE``, false-alarm level
``DELTA``, half-life 500 rows, fed the split-conformal miscoverage indicators; the delay is the number
of labelled rows from the shift to the alarm (median and 90th percentile over the streams that alarmed);
in brackets, the alarmed streams whose split-conformal coverage after the shift stayed >= 1 - alpha -
tolerance, and the streams whose coverage after the shift fell below that without an alarm. Without
shift, ``null_streams`` streams of ``null_horizon`` rows give the false-alarm rate with a Clopper-
Pearson 95% interval; the test split's own miscoverage under the validation threshold is listed (the
null holds when it is at most ``alpha + tolerance``).

Run: ``flock /tmp/cpu.lock .venv/bin/python benchmarks/conformal_online.py [streams] [null_streams] [null_horizon]``
(default 20, 1000, 10000); output in benchmarks/results/conformal_online.txt.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import calibration as cal
from benchmarks._common import environment
from benchmarks.drift_alarms import Served, clopper_pearson, shift_sampler
from tests.helpers import load_split

DATASETS = ["cifar10_resnet50_cross_entropy", "cifar10_lenet5", "cifar100_densenet-bc-100"]
SCORE, ALPHA, GAMMA, FAST_GAMMA = "lac", 0.1, 0.005, 0.02
TOLERANCE, DELTA, HALF_LIFE = 0.02, 0.05, 500.0
BEFORE, AFTER = 2000, 8000
SHIFTS = [("temperature", 2.0), ("temperature", 0.5), ("tweak-one", 0.9), ("class swap", 3)]
OUT = Path(__file__).resolve().parent / "results" / "conformal_online.txt"


def calibration_rows(name: str, served: Served) -> tuple[np.ndarray, np.ndarray]:
    kind, val, labels = load_split(name, "val")
    logits = val.astype(np.float64) if kind == "logits" else np.log(np.clip(val, 1e-12, 1.0))
    return served.calibrator.predict_proba(logits), labels


def interval(values) -> str:
    values = np.asarray(values, dtype=np.float64)
    half = 1.96 * values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
    return f"{values.mean():.4f} ± {half:.4f}"


def streams_with_shift(served: Served, rng, streams: int, kind: str, size) -> list:
    """Per stream: (probabilities, labels) of BEFORE unshifted rows then AFTER shifted rows."""
    before = rng.integers(0, len(served.labels), (streams, BEFORE))
    table, rows, labels = shift_sampler(served, rng, streams, kind, size)(AFTER)
    return [(np.concatenate([served.probs[before[s]], table[0][rows[s]]]),
             np.concatenate([served.labels[before[s]], labels[s]])) for s in range(streams)]


def one_shift(pc, yc, predictor, data) -> dict:
    out = {f"{m}{part}": [] for m in ("split", "aci", "aci_fast", "dtaci") for part in ("", "_after", "_size")}
    miscovered = []
    for probs, labels in data:
        mask = predictor.predict_sets(probs)
        covered = mask[np.arange(len(labels)), labels]
        miscovered.append(~covered)
        out["split"].append(covered.mean())
        out["split_after"].append(covered[BEFORE:].mean())
        out["split_size"].append(mask.sum(axis=1).mean())
        for name, online in (("aci", cal.AdaptiveConformal(ALPHA, GAMMA, score=SCORE)),
                             ("aci_fast", cal.AdaptiveConformal(ALPHA, FAST_GAMMA, score=SCORE)),
                             ("dtaci", cal.DtACI(ALPHA, score=SCORE))):
            record = online.fit(pc, yc).update(probs, labels)
            out[name].append(record.covered.mean())
            out[name + "_after"].append(record.covered[BEFORE:].mean())
            out[name + "_size"].append(record.set_size.mean())
    alarm = cal.CoverageAlarm(ALPHA, TOLERANCE, DELTA, HALF_LIFE, shape=(len(data),)).update(np.array(miscovered))
    out["alarm_at"] = alarm.alarm_at
    out["within_null"] = np.array(out["split_after"]) >= 1 - ALPHA - TOLERANCE  # post-shift miscoverage <= b
    return out


def no_shift_false_alarms(served: Served, predictor, rng, streams: int, horizon: int) -> tuple[int, float]:
    """(streams that alarmed, the test split's own miscoverage) on unshifted streams."""
    label_covered = predictor.predict_sets(served.probs)[np.arange(len(served.labels)), served.labels]
    alarm = cal.CoverageAlarm(ALPHA, TOLERANCE, DELTA, HALF_LIFE, shape=(streams,))
    for start in range(0, horizon, 2000):
        rows = rng.integers(0, len(served.labels), (streams, min(2000, horizon - start)))
        alarm.update(~label_covered[rows])
    return int(alarm.alarmed.sum()), float(1 - label_covered.mean())


def main() -> None:
    streams, null_streams, null_horizon = (int(a) for a in (sys.argv[1:] + ["20", "1000", "10000"][len(sys.argv[1:]):]))
    rng = np.random.default_rng(2026)
    lines = [f"# Conformal sets online: split conformal vs ACI / DtACI, coverage alarm (target coverage {1 - ALPHA})",
             "", f"Environment: {environment(['numpy', 'scipy'])}", "",
             f"score {SCORE}, alpha {ALPHA}, ACI gamma {GAMMA} and {FAST_GAMMA}, "
             "DtACI defaults (gammas 0.001*2^i, I=100); "
             f"{streams} streams per shift of {BEFORE} unshifted + {AFTER} shifted rows; alarm tolerance "
             f"{TOLERANCE}, delta {DELTA}, half-life {HALF_LIFE:g}. Coverage: mean over streams ± 1.96 SE.", ""]
    started = time.perf_counter()
    for name in DATASETS:
        served = Served(name)
        pc, yc = calibration_rows(name, served)
        predictor = cal.SetPredictor.fit(pc, yc, score=SCORE, alphas=[ALPHA])
        alarms, own = no_shift_false_alarms(served, predictor, rng, null_streams, null_horizon)
        low, high = clopper_pearson(alarms, null_streams)
        lines += [f"## {name}", "",
                  f"No shift: {alarms}/{null_streams} streams of {null_horizon} rows alarmed: false-alarm rate "
                  f"{alarms / null_streams:.4f} [{low:.4f}, {high:.4f}] (delta {DELTA}); the test split's own "
                  f"miscoverage under the validation threshold: {own:.4f}", "",
                  f"| shift | split conf. coverage (all / after shift) | ACI gamma {GAMMA} (all / after) "
                  f"| ACI gamma {FAST_GAMMA} (all / after) | DtACI (all / after) "
                  "| mean set size split / ACI / ACI fast / DtACI | alarmed (still covered / under-covered, no alarm) "
                  "| delay median / p90 |",
                  "|---|---|---|---|---|---|---|---|"]
        for kind, size in SHIFTS:
            out = one_shift(pc, yc, predictor, streams_with_shift(served, rng, streams, kind, size))
            fired = out["alarm_at"][out["alarm_at"] > 0]
            delays = fired - BEFORE
            delay = f"{np.median(delays):.0f} / {np.percentile(delays, 90):.0f}" if len(delays) else "-"
            early = int((fired <= BEFORE).sum())
            false = int(((out["alarm_at"] > 0) & out["within_null"]).sum())
            missed = int(((out["alarm_at"] <= 0) & ~out["within_null"]).sum())
            counts = f"{len(fired)}/{streams} ({false} / {missed}){f', {early} before the shift' if early else ''}"
            sizes = " / ".join(f"{np.mean(out[m + '_size']):.2f}" for m in ("split", "aci", "aci_fast", "dtaci"))
            lines.append(
                f"| {kind} {size} | {interval(out['split'])} / {interval(out['split_after'])} "
                f"| {interval(out['aci'])} / {interval(out['aci_after'])} "
                f"| {interval(out['aci_fast'])} / {interval(out['aci_fast_after'])} "
                f"| {interval(out['dtaci'])} / {interval(out['dtaci_after'])} "
                f"| {sizes} "
                f"| {counts} | {delay} |")
        lines.append("")
        print("\n".join(lines[-6:]), flush=True)
    lines.append(f"Wall time {time.perf_counter() - started:.0f} s. Command: `flock /tmp/cpu.lock .venv/bin/python "
                 f"benchmarks/conformal_online.py {streams} {null_streams} {null_horizon}`")
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
