"""Cut the tutorial's example files from the shared CIFAR-10 ResNet-50 outputs.

    python examples/make_examples.py [DATA_DIR]     # DATA_DIR: ../shared/data by default

Writes, next to this script (float32 logits, 10 classes; ids are strings):

- ``val.npz``: ``logits``, ``labels`` of the first 1000 validation rows (fit here).
- ``held-out.npz``: ``logits``, ``labels`` of validation rows 1000-1999, which no calibrator is
  fitted on (a conformal set predictor's held-out rows).
- ``batch.npz``: ``logits``, ``request_id`` of test rows 0-499 (served with the calibrator).
- ``batch-labels.csv``: ``id,label`` of those rows (the labels that arrive later).
- ``shifted.npz`` / ``shifted-labels.csv``: test rows 500-1099 with logits times 0.3, as if the
  upstream model were retrained and now sent softer logits (the calibrator fitted before becomes
  under-confident).
- ``later.npz`` / ``later-labels.csv``: test rows 1100-1499, shifted the same way (what arrives
  after the refit, to evaluate it on).

Deterministic: the same inputs give the same files, byte for byte (no randomness, no timestamps
beyond numpy's zip entries)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SOFTER = np.float32(0.3)


def _batch(name: str, logits: np.ndarray, labels: np.ndarray, first: int, prefix: str) -> None:
    ids = np.array([f"{prefix}-{first + i:05d}" for i in range(len(labels))])
    np.savez_compressed(HERE / f"{name}.npz", logits=logits, request_id=ids)
    rows = "".join(f"{i},{int(y)}\n" for i, y in zip(ids, labels, strict=True))
    (HERE / f"{name}-labels.csv").write_text("id,label\n" + rows)


def main(data: Path) -> None:
    with np.load(data / "cifar10_resnet50_cross_entropy_val.npz") as val:
        np.savez_compressed(HERE / "val.npz", logits=val["logits"][:1000], labels=val["labels"][:1000])
        np.savez_compressed(HERE / "held-out.npz", logits=val["logits"][1000:2000], labels=val["labels"][1000:2000])
    with np.load(data / "cifar10_resnet50_cross_entropy_test.npz") as test:
        logits, labels = test["logits"], test["labels"]
    _batch("batch", logits[:500], labels[:500], 0, "req")
    _batch("shifted", logits[500:1100] * SOFTER, labels[500:1100], 500, "req")
    _batch("later", logits[1100:1500] * SOFTER, labels[1100:1500], 1100, "req")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent.parent / "shared" / "data")
