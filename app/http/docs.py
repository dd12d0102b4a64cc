"""``/docs`` (Swagger UI) and ``/redoc`` served from files installed with the service, not a CDN,
so that they work on a machine without internet.

FastAPI's own pages load their JavaScript, CSS, favicon and (ReDoc) Google fonts from
cdn.jsdelivr.net, fastapi.tiangolo.com and fonts.googleapis.com, and ReDoc's script a logo from
cdn.redoc.ly (kept out by ``/redoc``'s Content-Security-Policy). The same files ship in the
``fastapi-offline`` package (Swagger UI 5 and ReDoc 2, MIT/Apache-2.0); only its ``static``
directory is used here, mounted under :data:`ASSETS_URL`. The pages stay out of the OpenAPI
document (``include_in_schema=False``)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

ASSETS_URL = "/docs-assets"
ASSETS_DIRECTORY = Path(str(files("fastapi_offline") / "static"))
SWAGGER_JS = "swagger-ui-bundle.js"
SWAGGER_CSS = "swagger-ui.css"
REDOC_JS = "redoc.standalone.js"
FAVICON = "favicon.png"
# ReDoc's script draws a "by Redocly" logo from cdn.redoc.ly: the page's policy keeps the browser from
# asking another host for anything (the image is never requested; its error handler then drops it)
REDOC_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                "worker-src 'self' blob:; connect-src 'self'; font-src 'self' data:")


class AssetsMount(Mount):
    """The assets' mount, named in the scope as the route that took the request, so that metrics
    and the access log count every asset, and every 404 under it, as ``/docs-assets``: a plain
    mount leaves no path parameters in the scope, so ``app.http.middleware.route_label`` would
    label each requested path on its own, as many labels as a client cares to invent."""

    def matches(self, scope):
        match, child_scope = super().matches(scope)
        if child_scope:
            child_scope["route"] = self
        return match, child_scope


def install(app: FastAPI, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Mount the assets and add the two pages and Swagger UI's OAuth2 redirect page, as plain
    Starlette routes like FastAPI's own (GET and HEAD, labelled by path); ``app`` is created with
    ``docs_url=None, redoc_url=None``."""
    app.router.routes.append(AssetsMount(ASSETS_URL, app=StaticFiles(directory=ASSETS_DIRECTORY),
                                         name="docs-assets"))
    oauth2_redirect_url = app.swagger_ui_oauth2_redirect_url
    if oauth2_redirect_url is None:
        raise ValueError("the docs pages need the app's swagger_ui_oauth2_redirect_url")

    def root(request: Request) -> str:     # behind a proxy that strips a prefix, as FastAPI's pages do
        return request.scope.get("root_path", "").rstrip("/")

    def asset(request: Request, name: str) -> str:
        return f"{root(request)}{ASSETS_URL}/{name}"

    def openapi_url(request: Request) -> str:
        return f"{root(request)}{app.openapi_url}"

    async def swagger_ui(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url(request), title=f"{app.title} - Swagger UI",
            swagger_js_url=asset(request, SWAGGER_JS), swagger_css_url=asset(request, SWAGGER_CSS),
            swagger_favicon_url=asset(request, FAVICON), oauth2_redirect_url=root(request) + oauth2_redirect_url,
            init_oauth=app.swagger_ui_init_oauth, swagger_ui_parameters=app.swagger_ui_parameters)

    async def swagger_ui_oauth2_redirect(request: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc(request: Request) -> HTMLResponse:
        page = get_redoc_html(openapi_url=openapi_url(request), title=f"{app.title} - ReDoc",
                              redoc_js_url=asset(request, REDOC_JS), redoc_favicon_url=asset(request, FAVICON),
                              with_google_fonts=False)
        page.headers["Content-Security-Policy"] = REDOC_POLICY
        return page

    app.add_route(docs_url, swagger_ui, include_in_schema=False)
    app.add_route(oauth2_redirect_url, swagger_ui_oauth2_redirect, include_in_schema=False)
    app.add_route(redoc_url, redoc, include_in_schema=False)
