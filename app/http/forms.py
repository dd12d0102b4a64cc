"""The dashboard's HTML form posts (``/ui/login``, ``/ui/logout``): who may send them and how they
are read. ``read_form`` raises ``FormRefused`` (a status and a detail) for what it refuses; the
routes answer with a page.

**Cross-site posts are refused (403)**, by the rule of Go's ``net/http.CrossOriginProtection``
(F. Valsorda, "Cross-Site Request Forgery", 2025), from what browsers send with a form post:

1. ``Sec-Fetch-Site`` (Fetch Metadata; sent by Chrome 76+, Firefox 90+, Safari 16.4+): allowed
   when ``same-origin``, or ``none`` (the user's own navigation); refused otherwise
   (``same-site``: another host of the same site, e.g. a sibling subdomain; ``cross-site``).
2. Without it, ``Origin`` (sent on every POST by those browsers and by older ones): allowed when
   its host and port are the request's ``Host``; refused otherwise (``null`` included). The
   scheme is not compared: behind a proxy that ends TLS the service sees http where the browser
   saw https.
3. With neither, allowed: a browser sends at least ``Origin`` on a POST, so such a request comes
   from a program (curl, a script), and a forged post needs the victim's browser.

**Malformed forms are 4xx, never 500**: a body with content must be
``application/x-www-form-urlencoded`` (415; an empty body may come without a type); it may be
at most ``CALIBRATION_UI_FORM_MAX_BYTES`` (413, read while streaming); it must be ``name=value``
pairs (percent-encoded UTF-8) that name only the form's own fields, each at most once (400).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from fastapi import Request

FORM_TYPE = "application/x-www-form-urlencoded"
SAME_ORIGIN_FETCHES = ("same-origin", "none")


class FormRefused(Exception):
    """A form post the dashboard does not take: ``status`` and what was wrong."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


def cross_site(request: Request) -> str | None:
    """Why ``request`` is a cross-site post (see the module), or ``None`` when it is not."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        if fetch_site.lower() in SAME_ORIGIN_FETCHES:
            return None
        return f"cross-site form posts are refused (Sec-Fetch-Site: {fetch_site})"
    origin = request.headers.get("origin")
    if origin is None:
        return None
    host = (request.headers.get("host") or "").lower()
    if host and urlsplit(origin).netloc.lower() == host:
        return None
    return f"cross-site form posts are refused (Origin {origin} is not this service's {host})"


async def _body(request: Request, max_bytes: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise FormRefused(413, f"the form is larger than {max_bytes} bytes (CALIBRATION_UI_FORM_MAX_BYTES)")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_form(request: Request, fields: tuple[str, ...], max_bytes: int) -> dict[str, str]:
    """The fields of a same-origin form post (each of ``fields`` at most once; absent ones are
    left out), or ``FormRefused``."""
    refused = cross_site(request)
    if refused is not None:
        raise FormRefused(403, refused)
    media_type = (request.headers.get("content-type") or "").partition(";")[0].strip().lower()
    body = await _body(request, max_bytes)
    if not body:
        return {}
    if media_type != FORM_TYPE:
        raise FormRefused(415, f"the form must be sent as {FORM_TYPE}")
    try:
        pairs = parse_qsl(body.decode("ascii"), keep_blank_values=True, strict_parsing=True, errors="strict")
    except (UnicodeDecodeError, ValueError) as exc:
        raise FormRefused(400, f"the form is not name=value pairs in UTF-8: {exc}") from exc
    form: dict[str, str] = {}
    for name, value in pairs:
        if name not in fields:
            raise FormRefused(400, f"the form has no field {name[:64]!r}")
        if name in form:
            raise FormRefused(400, f"the field {name!r} is sent more than once")
        form[name] = value
    return form
