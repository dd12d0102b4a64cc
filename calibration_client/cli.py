"""``calibration``: the calibration service from a terminal (typer + rich).

Progress, tables and errors are for people; ``--json`` prints the service's answer for scripts, and
the exit status says what went wrong (``EXIT_CODES`` in ``commands.base``). One module of
``commands`` per group of commands, each registering them on ``commands.base.app``; imported here
in the order ``--help`` lists them: ``fitting`` (fit, calibrate), ``reports`` (report, metrics, compare), ``registry``
(versions, calibrators, alias, jobs, methods), ``online`` (observe, logging, label, observations,
refit, quality, power), ``alarms`` (alarms, label-shift), ``promotion`` (evaluate, evaluations,
promote, gate, rollback, history), ``policy`` and ``sets`` (set-predictor, set-predictors, sets).
"""

from __future__ import annotations

import os
import sys

from .commands.base import app

# the commands register in this order, the order --help lists them
# isort: off
from .commands import fitting, reports, registry, online, alarms, promotion, policy, sets  # noqa: F401
# isort: on

__all__ = ["app", "main"]


def main() -> None:
    # the command line multiplies no matrices: one BLAS thread, not the pool of one a core that
    # numpy's OpenBLAS would start when a command loads numpy (unless the environment says otherwise)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # httpx imports its own command line (click, pygments, rich's syntax highlighting) when click is
    # installed, falling back to a stub where that import fails: ``None`` in ``sys.modules`` makes it fail
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    app()


if __name__ == "__main__":
    main()
