"""``Client`` (blocking) and ``AsyncClient`` (asyncio): the same methods over the service's
``/v1`` API. ``AsyncClient``'s methods are coroutines (``await client.fit(...)``)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import httpx

from . import _protocol as protocol
from . import _sets as sets
from . import _transport as transport
from ._transport import Call, Operation, Report, Sleep
from .errors import ConnectionFailed
from .models import Calibrator, Job, Version
from .online_methods import OnlineLoop, Progress
from .set_methods import SetMethods

if TYPE_CHECKING:  # numpy's arrays, loaded with the first array sent
    from .arrays import Calibrated, PredictionSets


class _Methods(OnlineLoop, SetMethods):
    """The public methods, shared by both clients: each builds an operation (``_protocol``) and
    hands it to ``_run``, which the sync client runs to a value and the async one to a
    coroutine."""

    def _run(self, operation: Operation):  # pragma: no cover - defined by the two clients
        raise NotImplementedError

    # -- fitting and serving ---------------------------------------------------------------

    def fit(self, name: str, logits=None, labels=None, *, probabilities=None, scores=None,
            method: str = "temperature", options: dict | None = None, class_names: Sequence[str] | None = None,
            description: str | None = None, tags: dict[str, str] | None = None,
            tensor_names: dict | None = None, wait: bool = True, progress: Progress | None = None,
            poll: float = 0.5) -> Version:
        """Fit ``method`` on a labelled batch and store it as the next version of ``name``.

        Give exactly one of ``logits`` ``(n, k)``, ``probabilities`` ``(n, k)`` or binary
        ``scores`` ``(n,)``, and integer ``labels`` ``(n,)``. Sent as an ``.npz`` body with the
        other fields as query parameters (``options`` and ``tags`` as JSON). ``method="auto"``
        compares candidates by cross-validation and keeps the best (``options``: candidates,
        folds, seed, preserve_accuracy). The service fits in the request today, so ``progress``
        (if given) hears 100 at the end; should it answer ``202`` with a job, the client waits
        for the job (``wait=False`` returns the ``Job``)."""
        return self._run(protocol.fit(name, logits, labels, probabilities, scores, method, options, class_names,
                                      description, tags, tensor_names, wait, progress, poll))

    def calibrate(self, ref: str, logits, *, version: int | None = None, input: str = "logits",
                  with_version: bool = False, binary: bool = True, ids: Sequence[str] | None = None,
                  dtype: str | None = None, outputs: Sequence[str] | None = None, coverage: float | None = None,
                  set_predictor: int | None = None) -> Calibrated | PredictionSets:
        """Calibrated probabilities of a batch from ``ref`` (``name`` for the latest version,
        ``name@alias``, or ``name`` with ``version=`` pinned), as a ``Calibrated`` array.

        ``input`` says what ``logits`` holds (``logits``, ``probabilities`` or ``scores``). The
        batch travels as ``.npy`` both ways; the binary answer names the version that served it in
        its ``X-Calibrator-Version`` header (``.version``). ``with_version=True`` (or
        ``binary=False``) asks in JSON instead. The probabilities come in the batch's precision
        (float32 for float32 or float16 logits, else float64; the service computes in float64 and
        casts the answer) unless ``dtype`` (``"float32"`` or ``"float64"``) asks for the other.

        ``ids`` (one per row, no commas) are your prediction ids, to post labels with later
        (``label``) when the calibrator logs what it serves (``set_logging``); they travel in the
        JSON body or, with a binary body, in the ``Prediction-Ids`` header. The answer's ``.ids``
        are the ids the service used: yours, or without them the ones it generated; ``.logged``
        how many rows it kept (0: this request was not sampled). Both are ``None`` when the
        calibrator does not log.

        ``outputs=["set"]`` (or ``["probabilities", "set"]``) with ``coverage`` (a level the
        version's set predictor was fitted at, ``fit_set_predictor``) returns ``PredictionSets``:
        the conformal prediction sets as an ``(n, k)`` boolean mask, from the newest set predictor
        of the serving version at that level, or the one with id ``set_predictor``; with
        ``probabilities`` asked too, they are its ``.probabilities``. ``set`` alone travels as
        ``.npy`` both ways (the service's uint8 mask) unless ``binary=False`` or ``ids`` are given."""
        if outputs is not None and "set" in outputs:
            return self._run(sets.calibrate_sets(ref, logits, version, input, outputs, coverage, set_predictor,
                                                 binary and not with_version, ids))
        if outputs is not None and list(outputs) != ["probabilities"]:
            raise ValueError("outputs are ['probabilities'] (the default) or include 'set'")
        return self._run(protocol.calibrate(ref, logits, version, input, with_version, binary, ids, dtype))

    def report(self, ref: str, logits, labels, *, version: int | None = None, input: str = "logits",
               n_bins: int = 15, bootstrap: int = 0, confidence: float = 0.95, seed: int = 0,
               image: str | None = None) -> dict | bytes:
        """Metrics before and after calibration on a labelled batch (a dict), or with
        ``image="png"``/``"svg"`` the reliability diagram's bytes."""
        return self._run(protocol.report(ref, logits, labels, version, input, n_bins, bootstrap, confidence,
                                         seed, image))

    def metrics(self, logits, labels, *, input: str = "logits", n_bins: int = 15, bootstrap: int = 0,
                confidence: float = 0.95, seed: int = 0) -> dict:
        """Metrics of a labelled batch as it is (no calibrator): ECE, MCE, Brier, NLL, ..."""
        return self._run(protocol.metrics(logits, labels, input, n_bins, bootstrap, confidence, seed))

    def compare(self, logits, labels, *, input: str = "logits", methods: Sequence[str | dict] | None = None,
                folds: int = 5, seed: int = 0, preserve_accuracy: bool = False, wait: bool = True,
                progress: Progress | None = None, poll: float = 0.5) -> dict | Job:
        """Cross-validated comparison of calibration methods and the one the selection rule
        picks. Runs as a job (``Prefer: respond-async``): with ``wait`` the client polls it every
        ``poll`` seconds, calling ``progress(percent)`` as the percent grows, and returns the
        comparison; ``wait=False`` returns the ``Job`` at once."""
        return self._run(protocol.compare(logits, labels, input, methods, folds, seed, preserve_accuracy, wait,
                                          progress, poll))

    # -- jobs ------------------------------------------------------------------------------

    def job(self, job_id: str) -> Job:
        return self._run(protocol.get_job(job_id))

    def wait_for_job(self, job_id: str, progress: Progress | None = None, poll: float = 0.5,
                     timeout: float | None = None) -> Job:
        """Poll a job until it is done and return it; a failed job raises ``JobFailed``."""
        return self._run(protocol.wait_for_job(job_id, progress, poll, timeout))

    # -- the registry ----------------------------------------------------------------------

    def calibrators(self) -> list[Calibrator]:
        """Every calibrator (all pages), by name."""
        return self._run(protocol.calibrators())

    def calibrator(self, name: str) -> Calibrator:
        return self._run(protocol.calibrator(name))

    def versions(self, name: str) -> list[Version]:
        """Every version of ``name`` (all pages), newest first."""
        return self._run(protocol.versions(name))

    def version(self, name: str, version: int) -> Version:
        return self._run(protocol.version(name, version))

    def set_alias(self, name: str, alias: str, version: int) -> dict:
        """Point ``alias`` (e.g. ``production``) at ``version``; serve it as ``name@alias``."""
        return self._run(protocol.set_alias(name, alias, version))

    def delete_alias(self, name: str, alias: str) -> None:
        return self._run(protocol.delete(f"/v1/calibrators/{protocol._segment(name)}/aliases/"
                                         f"{protocol._segment(alias)}"))

    def delete_version(self, name: str, version: int) -> None:
        return self._run(protocol.delete(f"/v1/calibrators/{protocol._segment(name)}/versions/{int(version)}"))

    def delete_calibrator(self, name: str) -> None:
        return self._run(protocol.delete(f"/v1/calibrators/{protocol._segment(name)}"))

    def methods(self) -> list[dict]:
        """The calibration methods and their option schemas."""
        return self._run(protocol.methods())

    def ready(self) -> dict:
        """``/readyz``: the database and schema checks (does not raise on 503)."""
        return self._run(protocol.ready())


class Client(_Methods):
    """A blocking client of the calibration service.

    ``url`` and ``api_key`` default to ``$CALIBRATION_URL`` (else ``http://127.0.0.1:8000``) and
    ``$CALIBRATION_API_KEY``. ``retries`` more tries follow a 429, a 503 or a transport error,
    after the answer's ``Retry-After`` or an exponential backoff; every POST carries one
    ``Idempotency-Key`` reused on its retries. Other keyword arguments go to ``httpx.Client`` (``verify``,
    ``transport``, ...; none: ``PlainHTTPTransport`` for ``http://``). A context manager, or ``close()``."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 60.0,
                 retries: int = 3, backoff: float = 0.5, max_backoff: float = 30.0,
                 max_retry_after: float = 120.0, headers: dict[str, str] | None = None, **httpx_options):
        self.url, sent, self.retry = transport.settings(url, api_key, retries, backoff, max_backoff,
                                                        max_retry_after, headers)
        self._http = httpx.Client(base_url=self.url, timeout=timeout, headers=sent,
                                  **transport.plain_http_transport(self.url, httpx_options))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def _send(self, call: Call):
        """The answer to ``call`` after its retries: the response or, for an ``owned_body``
        call, the response and its body (``transport.read_owned``); a problem raises."""
        request = transport.request(self._http, self.url, call)
        attempt = 0
        while True:
            try:
                response = self._http.send(request, stream=call.owned_body)
                if call.owned_body:
                    if response.status_code in call.ok:
                        return response, transport.read_owned(response)
                    response.read()
            except httpx.TransportError as exc:
                wait = self.retry.delay(attempt, None)
                if wait is None:
                    raise ConnectionFailed(f"cannot reach {self.url}: {exc!r}") from exc
            else:
                if response.status_code in call.ok:
                    return response
                wait = (self.retry.delay(attempt, response.headers.get("retry-after"))
                        if response.status_code in transport.RETRY_STATUSES else None)
                if wait is None:
                    raise transport.problem(response)
            self._sleep(wait)
            attempt += 1

    def _run(self, operation: Operation):
        reply = None
        try:
            while True:
                step = operation.send(reply)
                if isinstance(step, Call):
                    reply = self._send(step)
                elif isinstance(step, Sleep):
                    self._sleep(step.seconds)
                    reply = None
                elif isinstance(step, Report):
                    step.callback(step.percent)
                    reply = None
        except StopIteration as done:
            return done.value


class AsyncClient(_Methods):
    """The asyncio twin of ``Client``: the same constructor and methods, each a coroutine.
    ``progress`` callbacks may be plain functions or coroutine functions."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 60.0,
                 retries: int = 3, backoff: float = 0.5, max_backoff: float = 30.0,
                 max_retry_after: float = 120.0, headers: dict[str, str] | None = None, **httpx_options):
        self.url, sent, self.retry = transport.settings(url, api_key, retries, backoff, max_backoff,
                                                        max_retry_after, headers)
        self._http = httpx.AsyncClient(base_url=self.url, timeout=timeout, headers=sent, **httpx_options)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _sleep(self, seconds: float) -> None:
        import asyncio  # here: a blocking client (and the command line) never loads the event loop's modules

        await asyncio.sleep(seconds)

    async def _send(self, call: Call):
        request = transport.request(self._http, self.url, call)
        attempt = 0
        while True:
            try:
                response = await self._http.send(request, stream=call.owned_body)
                if call.owned_body:
                    if response.status_code in call.ok:
                        return response, await transport.aread_owned(response)
                    await response.aread()
            except httpx.TransportError as exc:
                wait = self.retry.delay(attempt, None)
                if wait is None:
                    raise ConnectionFailed(f"cannot reach {self.url}: {exc!r}") from exc
            else:
                if response.status_code in call.ok:
                    return response
                wait = (self.retry.delay(attempt, response.headers.get("retry-after"))
                        if response.status_code in transport.RETRY_STATUSES else None)
                if wait is None:
                    raise transport.problem(response)
            await self._sleep(wait)
            attempt += 1

    async def _drive(self, operation: Operation):
        reply = None
        try:
            while True:
                step = operation.send(reply)
                if isinstance(step, Call):
                    reply = await self._send(step)
                elif isinstance(step, Sleep):
                    await self._sleep(step.seconds)
                    reply = None
                elif isinstance(step, Report):
                    said = step.callback(step.percent)
                    if inspect.isawaitable(said):
                        await said
                    reply = None
        except StopIteration as done:
            return done.value

    def _run(self, operation: Operation):
        return self._drive(operation)
