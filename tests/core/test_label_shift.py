"""Label shift (calibration.label_shift, calibration.prior_shift): EM needs the source priors,
bias-corrected temperature scaling by hand and against its gradient, the evidence and shrinkage of
the suggested adjustment, and on the real outputs of ../shared/data an adjustment never worse
than serving the calibrated probabilities unadjusted (by more than 0.01 nats)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax

from calibration.label_shift import em_priors


def test_em_priors_without_source_priors_is_refused():
    """The mean of ``p`` is a fixed point of EM started there: a default taken from ``p`` returns
    it after one iteration whatever the shift, so the source priors must be given."""
    rng = np.random.default_rng(0)
    posterior = softmax(2.0 * rng.standard_normal((500, 3)), axis=1)
    with pytest.raises(ValueError, match="source_priors"):
        em_priors(posterior)
    with pytest.raises(ValueError, match="source_priors"):
        em_priors(posterior, None)
