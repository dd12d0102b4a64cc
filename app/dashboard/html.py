"""The page frame and the small pieces every page uses: escaping, tables, numbers, links."""

from __future__ import annotations

import math
from collections.abc import Set as AbstractSet
from html import escape
from urllib.parse import quote, urlencode

# a page loads nothing: no script, styles inline, SVG inline (the routes send this policy)
CONTENT_SECURITY_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                           "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1f24;background:#fff}
header{background:#1b2a3a;color:#fff;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:baseline}
header a{color:#fff;text-decoration:none}header a:hover,header a:focus{text-decoration:underline}
header .brand{font-weight:600}main{padding:1em 1.2em;max-width:72em}
h1{font-size:1.45em;margin:.3em 0 .6em}h2{font-size:1.15em;margin:1.4em 0 .5em}
table{border-collapse:collapse;margin:.4em 0 1em}caption{text-align:left;font-weight:600;padding:.3em 0}
th,td{border-bottom:1px solid #d6dbe1;padding:.3em .7em;text-align:left;vertical-align:top}
thead th{background:#eef1f4}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
a{color:#0b5cad}nav.crumbs{font-size:.9em;margin-bottom:.4em}.muted{color:#59636e}
.alias{display:inline-block;background:#e6f0fa;border:1px solid #9cc3e8;border-radius:.7em;padding:0 .5em;
margin:0 .2em .1em 0;font-size:.85em}
.status-succeeded{color:#176f2c}.status-failed{color:#b42318}.status-running{color:#0b5cad}
figure{margin:.5em 0}figcaption{font-size:.9em;color:#59636e;max-width:40em}
progress{width:8em;vertical-align:middle}form.login input{font:inherit;padding:.3em;width:28em;max-width:100%}
.badge{display:inline-block;border-radius:.8em;padding:.05em .6em;font-size:.85em;font-weight:600;white-space:nowrap}
.badge-ok{background:#dcf5e3;color:#176f2c;border:1px solid #8fd3a2}
.badge-alarmed{background:#fde2e0;color:#b42318;border:1px solid #f0a19a}
.badge-no-labels{background:#eef1f4;color:#59636e;border:1px solid #c3cad2}
.next{background:#f6f8fa;border-left:3px solid #9cc3e8;padding:.4em .8em}.next code{white-space:nowrap}
nav.windows a,nav.windows strong{margin-right:.6em}svg.chart{max-width:100%;height:auto}
"""


def text(value) -> str:
    """``value`` as escaped HTML text (``None`` as an empty string)."""
    return "" if value is None else escape(str(value), quote=True)


attr = text  # attribute values are escaped with quotes too


def url(*parts, **query) -> str:
    """An escaped path under ``/ui`` from path segments (each percent-encoded), and a query."""
    path = "/ui" + "".join("/" + quote(str(part), safe="") for part in parts)
    query = {k: v for k, v in query.items() if v not in (None, "")}
    return attr(path + ("?" + urlencode(query) if query else ""))


def link(href: str, label) -> str:
    return f'<a href="{href}">{text(label)}</a>'


def number(value, digits: int = 4) -> str:
    """A metric as shown: ``digits`` decimals; ``None`` (not finite) as an em dash."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{value:.{digits}f}"


def evalue(value) -> str:
    """An e-value as read: 4 significant digits between 0.001 and 10 000 (``3.142``, ``812.4``),
    else a mantissa of 3 digits and a plain exponent (``1.24e17``, ``3.1e-5``); ``None`` or not
    finite as an em dash."""
    if value is None or not math.isfinite(value):
        return "—"
    if value == 0 or 1e-3 <= abs(value) < 1e4:
        return f"{value:.4g}"
    mantissa, exponent = f"{value:.3g}".split("e")
    return f"{mantissa}e{int(exponent)}"


def num_cell(value, digits: int = 4) -> str:
    """A right-aligned cell with the value shown and its exact value in ``data-value``."""
    exact = "" if value is None else f' data-value="{attr(repr(value))}"'
    return f'<td class="num"{exact}>{number(value, digits)}</td>'


def when(value) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS UTC`` inside ``<time>``."""
    if value is None:
        return ""
    iso = value.isoformat() if hasattr(value, "isoformat") else str(value)
    shown = iso.replace("T", " ")[:19] + (" UTC" if hasattr(value, "isoformat") else "")
    return f'<time datetime="{attr(iso)}">{text(shown)}</time>'


def aliases(names) -> str:
    return "".join(f'<span class="alias">{text(name)}</span>' for name in names) or '<span class="muted">—</span>'


def table(caption: str, headers: list[str], rows: list[str], numeric: AbstractSet[int] = frozenset(),
          table_id: str | None = None) -> str:
    """A table with a caption and column headers (``scope="col"``); ``rows`` are ``<tr>`` HTML."""
    head = "".join(f'<th scope="col"{" class=num" if i in numeric else ""}>{text(h)}</th>'
                   for i, h in enumerate(headers))
    body = "".join(rows) or f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>'
    identity = f' id="{attr(table_id)}"' if table_id else ""
    return (f"<table{identity}><caption>{text(caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")


def crumbs(*items: tuple[str | None, str]) -> str:
    """A breadcrumb trail of ``(href or None, label)``."""
    shown = [link(href, label) if href else f'<span aria-current="page">{text(label)}</span>' for href, label in items]
    return f'<nav class="crumbs" aria-label="breadcrumb">{" › ".join(shown)}</nav>'


def page(title: str, body: str, *, signed_in: bool = False, refresh: int | None = None) -> str:
    """A whole page: the header's navigation, ``<h1>`` and the body; reloaded every ``refresh``
    seconds when given (no script: a ``<meta http-equiv="refresh">``)."""
    sign_out = ('<form method="post" action="/ui/logout" style="margin-left:auto">'
                '<button type="submit">Sign out</button></form>') if signed_in else ""
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            + (f'<meta http-equiv="refresh" content="{int(refresh)}">' if refresh else "") +
            f"<title>{text(title)} · Calibration service</title><style>{STYLE}</style></head><body>"
            f'<header><span class="brand">Calibration service</span><nav aria-label="main">'
            f'<a href="/ui">Calibrators</a> · <a href="/ui/jobs">Jobs</a> · <a href="/docs">API docs</a></nav>'
            f"{sign_out}</header><main><h1>{text(title)}</h1>{body}</main></body></html>")
