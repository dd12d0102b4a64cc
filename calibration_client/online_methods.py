"""The client's methods of the online loop (observations, logging, labels, fits from the log,
quality, alarms, the label-shift estimate, evaluations, alias moves and refit policies),
shared by ``Client`` and ``AsyncClient`` as the rest: each builds an operation and hands it to ``_run``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import _online as online
from . import _protocol as protocol
from .models import Job, Version

Progress = Callable[[float], Any]


class OnlineLoop:
    def _run(self, operation):  # pragma: no cover - defined by the two clients
        raise NotImplementedError

    def observe(self, name: str, logits, labels, *, input: str = "logits", observed_at: str | None = None) -> dict:
        """Append a labelled batch to ``name``'s observations (created if new); a retried append
        carries the same generated Idempotency-Key, so it counts once."""
        return self._run(online.observe(name, logits, labels, input, observed_at))

    def observations(self, name: str) -> dict:
        """Counts per source, serving version and day, class balance, and the prediction log's state."""
        return self._run(online.observations(name))

    def set_logging(self, name: str, sample_rate: float) -> dict:
        """Log ``sample_rate`` of the rows ``name`` serves, with prediction ids (0 turns it off)."""
        return self._run(online.set_logging(name, sample_rate))

    def label(self, name: str, ids: Sequence[str], labels: Sequence[int]) -> dict:
        """Labels of logged predictions, by id; the answer has a status per id."""
        return self._run(online.label(name, ids, labels))

    def fit_stored(self, name: str, method: str = "temperature", *, options: dict | None = None,
                   observations: dict | None = None, wait: bool = True, progress: Progress | None = None,
                   poll: float = 0.5) -> Version:
        """Fit on ``name``'s stored observations (``observations``: ``last``, ``since``, ``until``,
        ``source``, ``version``; all of them by default)."""
        return self._run(online.fit_stored(name, method, options, observations or {}, wait, progress, poll))

    def quality(self, name: str, *, window: str = "day", version: int | None = None, windows: int = 12,
                bootstrap: int = 100) -> dict:
        """Calibration quality per window (``hour``, ``day`` or a number of rows) of ``name``'s observations."""
        return self._run(online.quality(name, window, version, windows, bootstrap))

    def alarms(self, name: str, *, drift: float | None = None) -> dict:
        """The drift monitors of ``name``'s versions and their alarms; with ``drift`` (a shift of
        the expected confidence, 0-1) the label-free monitors also say how many reference rows
        they need to see it."""
        return self._run(online.alarms(name, drift))

    def evaluate_alarms(self, name: str, *, alpha: float | None = None, tolerance: float | None = None,
                        half_life: float | None = None, class_tolerance: float | None = None) -> dict:
        """Feed the observations that arrived since the last evaluation to the drift monitors
        (``alpha``: false-alarm probability, ever; ``tolerance``: drift of mean confidence minus
        accuracy that is no alarm; ``half_life``: rows of the bet's memory; ``class_tolerance``:
        the same per class). Options left ``None`` take the service's defaults; changed options
        restart the monitors from the first row."""
        return self._run(online.evaluate_alarms(name, alpha, tolerance, half_life, class_tolerance))

    def label_shift(self, name: str, *, version: int | None = None, last: int | None = None,
                    alpha: float | None = None) -> dict:
        """The class priors of the prediction log's newest ``last`` rows, estimated without labels
        (EM and BBSE), and whether to serve adjusted priors: the likelihood-ratio test of no shift
        at level ``alpha`` (``suggestion``)."""
        return self._run(online.label_shift(name, version, last, alpha))

    def power(self, name: str, shift: str, size: float, *, labels: int = 50_000, streams: int = 200,
              signal: str = "labelled", version: int | None = None, shift_class: int | None = None,
              swap_classes: Sequence[int] | None = None, checkpoints: Sequence[int] | None = None,
              alpha: float = 0.01, tolerance: float = 0.02, class_tolerance: float = 0.02,
              half_life: float = 1000.0, confidence: float = 0.95, seed: int = 0, wait: bool = True,
              progress: Progress | None = None, poll: float = 0.5):
        """How often and how fast ``name``'s drift monitor would alarm under a shift (``temperature``:
        the logits times ``size``; ``tweak_one``: one class at prior ``size``; ``dirichlet``; ``swap``:
        ``size`` class pairs' labels exchanged), and how often with none: ``streams`` streams of up to
        ``labels`` rows drawn from its stored labelled observations, run as a job. Returns the job's
        result (``shifted`` and ``null``: detection probability within each checkpoint with
        Clopper-Pearson intervals, delay quantiles with order-statistic intervals, both at level
        ``confidence``, expected drift), or the ``Job`` without ``wait``.

        Example: ``client.power("demo", "temperature", 1.25, labels=50_000)["shifted"]["detected"]``."""
        fields = {"shift": shift, "size": size, "labels": labels, "streams": streams, "signal": signal,
                  "alpha": alpha, "tolerance": tolerance, "class_tolerance": class_tolerance,
                  "half_life": half_life, "confidence": confidence, "seed": seed}
        optional = {"version": version, "shift_class": shift_class,
                    "swap_classes": list(swap_classes) if swap_classes is not None else None,
                    "checkpoints": list(checkpoints) if checkpoints is not None else None}
        fields.update({key: value for key, value in optional.items() if value is not None})
        return self._run(online.power(name, fields, wait, progress, poll))

    def evaluate(self, name: str, challenger, champion=None, *, alpha: float = 0.05,
                 observations: dict | None = None, decide_on: str | None = None,
                 bootstrap: int | None = None) -> dict:
        """Challenger against champion (versions or aliases; no champion: shadow) on held-out
        observations, with anytime-valid NLL and Brier differences and a verdict (on
        ``decide_on``: ``nll`` or ``brier``; ``bootstrap`` resamples of the ECE intervals; left
        ``None``, the service's defaults)."""
        return self._run(online.evaluate(name, challenger, champion, alpha, observations,
                                         {"decide_on": decide_on, "bootstrap": bootstrap}))

    def evaluations(self, name: str, limit: int | None = None) -> dict:
        """The newest ``limit`` evaluations of ``name`` in brief (versions, rows, level, verdict)."""
        return self._run(online.get(f"{online._base(name)}/evaluations", protocol._query(limit=limit)))

    def evaluation(self, name: str, evaluation_id: str) -> dict:
        """One evaluation in full (as ``evaluate`` answered it)."""
        return self._run(online.get(f"{online._base(name)}/evaluations/{protocol._segment(evaluation_id)}"))

    def promote(self, name: str, alias: str, version: int, evaluation: str | None = None) -> dict:
        """Move ``alias`` to ``version``; a gated alias needs an ``evaluation`` id whose verdict favours it."""
        return self._run(online.move_alias(name, alias, version, evaluation))

    def gate(self, name: str, alias: str, require_evaluation: bool = True) -> dict:
        """Make ``alias`` move only with an evaluation's evidence (or lift that rule)."""
        return self._run(online.put(f"{online._base(name)}/aliases/{protocol._segment(alias)}/gate",
                                    {"require_evaluation": require_evaluation}))

    def alias_history(self, name: str, alias: str) -> dict:
        return self._run(online.get(f"{online._base(name)}/aliases/{protocol._segment(alias)}/history"))

    def rollback(self, name: str, alias: str) -> dict:
        """Point ``alias`` back at the version before its last move."""
        return self._run(online.post(f"{online._base(name)}/aliases/{protocol._segment(alias)}/rollback"))

    # -- refit policies ------------------------------------------------------------------------

    def policy(self, name: str) -> dict:
        """``name``'s refit policy, with when it last ran and its last job."""
        return self._run(online.get(f"{online._base(name)}/policy"))

    def set_policy(self, name: str, **policy) -> dict:
        """Set (replace) ``name``'s refit policy: a trigger (``every_labels``, ``on_alarm``,
        ``every_seconds``), the data (``last``, ``holdout``), the ``method`` and ``options``, and the
        ``alias`` the new version must beat (``promote``: move it when the verdict at ``alpha``
        favours the new version). Fields not given take the service's defaults."""
        return self._run(online.put(f"{online._base(name)}/policy", policy))

    def run_policy(self, name: str, *, force: bool = False, wait: bool = True, progress: Progress | None = None,
                   poll: float = 0.5) -> dict | Job:
        """Check the policy: ``{"triggered": false, ...}`` when no trigger fired (and not
        ``force``), else the refit job's result (the new version, the evaluation, its verdict,
        whether the alias moved); ``wait=False`` returns the ``Job`` at once."""
        return self._run(online.run_policy(name, force, wait, progress, poll))
