"""Where calibrate, report and inference run (``CALIBRATION_DEVICE``).

``cpu`` (the default) is numpy. ``cuda``, ``cuda:N`` and ``torch-cpu`` (torch on the CPU, to
exercise the device path without a GPU) need the ``torch`` extra: the decoded batch is copied
to that device, the calibrator predicts there (``calibration.backend``), and the
probabilities come back to the host to be encoded. Fitted parameters are stored the same way
whatever the device, so a calibrator fitted on one serves on any other. Fits and metrics run on
the host.
"""

from __future__ import annotations

import numpy as np

import calibration as cal

from ..settings import DEVICE_PATTERN


class Device:
    def __init__(self, name: str):
        if not DEVICE_PATTERN.match(name):
            raise ValueError(f"CALIBRATION_DEVICE must be cpu, torch-cpu, cuda or cuda:N, got {name!r}")
        self.name = name
        self.torch = None
        if name == "cpu":
            return
        try:
            import torch
        except ImportError as exc:
            raise ValueError(f"CALIBRATION_DEVICE={name} needs the torch extra "
                             "(pip install 'calibration-service[torch]')") from exc
        if name.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"CALIBRATION_DEVICE={name}, but torch sees no CUDA device")
        self.torch = torch
        self.target = torch.device("cpu" if name == "torch-cpu" else name)
        torch.empty(1, device=self.target)  # fail now, not on the first request, if it is unusable

    def predict(self, calibrator: cal.Calibrator, scores: cal.InputBatch, dtype=None) -> np.ndarray:
        """Calibrated probabilities of a validated host batch, computed on this device (in float64;
        as ``dtype``, a numpy dtype, when given: the float64 answer's cast)."""
        if self.torch is None:
            return calibrator.predict_batch(scores, dtype)
        batch = self.torch.as_tensor(getattr(scores, scores.source), device=self.target)
        host = cal.to_host(calibrator.predict_batch(cal.InputBatch(**{scores.source: batch})))
        return host if dtype is None else host.astype(dtype, copy=False)
