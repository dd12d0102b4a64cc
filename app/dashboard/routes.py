"""The dashboard at ``/ui``: server-rendered HTML pages of the calibrators' health (serving
aliases, drift alarms, ECE sparkline, label freshness, logging), versions (metrics and the
reliability diagram of the stored validation report), a calibrator's online loop (quality over
time per window, e-values against their threshold, evaluations, alias history, jobs), and jobs. The pages
are built by ``app.dashboard``; these routes read through the service and answer.

Access is the API's read scope. With keys off (the default) the pages are open. With keys on,
a request may present its key as the API does (``X-API-Key`` or ``Authorization: Bearer``),
which a browser cannot send on a link, so ``/ui/login`` takes a key in a form, checks its read
scope and keeps it in an ``HttpOnly; SameSite=Strict`` cookie whose path is ``/ui`` (``Secure``
over https): the cookie is read by these routes only, never by the API, so it cannot be used to
write through a forged cross-site request. The forms post only from this service's own pages:
cross-site posts are refused (``app.http.forms``), so no other site can sign a browser in with a
key of its choosing (login CSRF) or out. The key never goes in a URL (nor in the access log).
Responses carry a Content-Security-Policy that allows no script and no other host.
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..http.auth import presented_key
from ..http.forms import FormRefused, read_form
from ..http.problems import Problem
from ..jobs.schemas import JOB_STATES
from ..monitoring import alarms as drift_alarms
from ..monitoring import quality, webhooks
from ..platform.errors import ServiceError
from ..promotion import aliases as promotion
from . import pages, reads
from .calibrator import online_page
from .home import home_page
from .html import CONTENT_SECURITY_POLICY

router = APIRouter(prefix="/ui", include_in_schema=False)
COOKIE = "calibration_ui_key"
PAGE_SIZE = 50
JOBS_SHOWN = 100
QUALITY_BOOTSTRAP = 100  # resamples of the online page's quality intervals
# the metrics the online page draws (chart and table), each with its interval; the others are not computed
QUALITY_DRAWN = ("ece", "nll", "accuracy")
CALIBRATOR_JOBS = 10  # the newest jobs listed on a calibrator's page
HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}


def html(content: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(content, status_code=status, headers=HEADERS)


def signed_in(request: Request) -> bool:
    return request.app.state.keys is not None and COOKIE in request.cookies


async def denied(request: Request) -> Response | None:
    """``None`` when the request may read (keys off, or a key with the read scope in a header
    or the dashboard's cookie), else the page to answer with."""
    verifier = request.app.state.keys
    if verifier is None:
        return None
    presented = presented_key(request) or request.cookies.get(COOKIE)
    if not presented:
        return html(pages.login_page(), 401)
    try:
        scopes = await verifier.scopes(presented)
    except Problem as problem:
        return html(pages.login_page(problem.detail), problem.status)
    if "read" not in scopes:
        return html(pages.error_page(403, "Forbidden", "this API key lacks the 'read' scope", True), 403)
    return None


async def render(request: Request, build, *args) -> Response:
    """Check access, then read and render in a thread (the reads block); a domain error (a
    calibrator or version that does not exist, a database that does not answer) is a page."""
    refused = await denied(request)
    if refused is not None:
        return refused
    try:
        return html(await run_in_threadpool(build, *args))
    except ServiceError as error:
        return html(pages.error_page(error.status, error.title, error.detail, signed_in(request)), error.status)


def service_of(request: Request):
    return request.app.state.service


@router.get("", response_class=HTMLResponse)
async def calibrators(request: Request, page_token: str | None = Query(None, max_length=1000)):
    """One row per calibrator: serving aliases, health, ECE sparkline, label freshness, logging."""
    service = service_of(request)

    def build() -> str:
        listing = service.list_calibrators(PAGE_SIZE, page_token)
        healths = [reads.health(service, c) for c in listing["calibrators"]]
        return home_page(listing, healths, signed_in(request))

    return await render(request, build)


@router.get("/calibrators/{name}", response_class=HTMLResponse)
async def calibrator(request: Request, name: str, page_token: str | None = Query(None, max_length=1000)):
    service = service_of(request)

    def build() -> str:
        return pages.versions_page(service.get_calibrator(name), service.list_versions(name, PAGE_SIZE, page_token),
                                   signed_in(request))

    return await render(request, build)


@router.get("/calibrators/{name}/versions/{version}", response_class=HTMLResponse)
async def version(request: Request, name: str, version: int = Path(ge=1, le=2**31 - 1)):
    service = service_of(request)
    return await render(request, lambda: pages.version_page(service.get_version(name, version), signed_in(request)))


@router.get("/calibrators/{name}/online", response_class=HTMLResponse)
async def online(request: Request, name: str, window: str | None = Query(None, max_length=20)):
    """A calibrator's health: quality over time (``window``: rows per window, ``hour`` or ``day``;
    by default the round number of rows that shows its labelled rows in 12 windows), drift
    monitors and their e-values, evaluations, alias history and jobs."""
    service = service_of(request)
    max_rows = request.app.state.settings.ui_trajectory_rows

    def build() -> str:
        calibrator = service.get_calibrator(name)
        summary = service.observations.summary(name)
        automatic = reads.row_window(summary["total_rows"])
        chosen = window.strip() if window and window.strip() else automatic
        answer = quality.quality(service, name, quality.QualityQuery(window=chosen, bootstrap=QUALITY_BOOTSTRAP,
                                                                    metrics=QUALITY_DRAWN))
        alarms = drift_alarms.alarms(service.db, name)
        state, detail = reads.state_of(summary, alarms)
        facts = {"summary": summary, "quality": answer, "alarms": alarms, "state": state, "detail": detail,
                 "histories": [promotion.history(service.db, name, alias) for alias in calibrator["aliases"]],
                 "evaluations": reads.evaluations(service, name), "deliveries": webhooks.deliveries(service.db, name),
                 "trajectories": reads.trajectories(service, name, max_rows),
                 "markers": reads.alarm_windows(service, name, chosen, alarms),
                 "jobs": service.jobs.list(name, None, CALIBRATOR_JOBS), "automatic": automatic}
        return online_page(name, facts, signed_in(request))

    return await render(request, build)


@router.get("/jobs", response_class=HTMLResponse)
async def jobs(request: Request, calibrator: str | None = Query(None, max_length=128),
               status: str | None = Query(None, max_length=16)):
    if status and status not in JOB_STATES:
        return html(pages.error_page(422, "Invalid input", f"status must be one of {', '.join(JOB_STATES)}",
                                     signed_in(request)), 422)
    runner = service_of(request).jobs
    return await render(request, lambda: pages.jobs_page(runner.list(calibrator or None, status or None, JOBS_SHOWN),
                                                         calibrator, status, signed_in(request)))


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
async def job(request: Request, job_id: str = Path(max_length=64)):
    runner = service_of(request).jobs
    return await render(request, lambda: pages.job_page(runner.get(job_id), signed_in(request)))


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request):
    if request.app.state.keys is None:
        return RedirectResponse("/ui", status_code=303)
    return html(pages.login_page())


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request):
    """A same-origin form post (``app.http.forms``: cross-site posts get 403, malformed forms a
    4xx) with ``api_key``: a key with the read scope is kept in the cookie and the browser sent on
    to ``/ui``."""
    try:
        form = await read_form(request, ("api_key",), request.app.state.settings.ui_form_max_bytes)
    except FormRefused as refused:
        return html(pages.login_page(refused.detail), refused.status)
    verifier = request.app.state.keys
    if verifier is None:
        return RedirectResponse("/ui", status_code=303)
    key = form.get("api_key", "").strip()
    if not key:
        return html(pages.login_page("enter an API key"), 401)
    try:
        scopes = await verifier.scopes(key)
    except Problem as problem:
        return html(pages.login_page(problem.detail), problem.status)
    if "read" not in scopes:
        return html(pages.login_page("this API key lacks the 'read' scope"), 403)
    answer = RedirectResponse("/ui", status_code=303, headers=HEADERS)
    answer.set_cookie(COOKIE, key, path="/ui", httponly=True, samesite="strict",
                      secure=request.url.scheme == "https")
    return answer


@router.post("/logout")
async def logout(request: Request):
    """A same-origin form post with no fields (``app.http.forms``) that drops the cookie."""
    try:
        await read_form(request, (), request.app.state.settings.ui_form_max_bytes)
    except FormRefused as refused:
        title = HTTPStatus(refused.status).phrase
        return html(pages.error_page(refused.status, title, refused.detail, signed_in(request)), refused.status)
    answer = RedirectResponse("/ui/login" if request.app.state.keys is not None else "/ui", status_code=303)
    answer.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")
    return answer
