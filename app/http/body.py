"""A request's body as one ``bytes`` object, for the routes that read it whole (calibrate, ``/v2``
infer, fits): what Starlette's ``Request.body()`` returns, without copying a body that arrived in
one message."""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request


async def read_body(request: Request) -> bytes:
    """``await request.body()``: the same bytes, kept on the request as Starlette keeps them (a later
    ``request.body()`` returns them), and the same errors (``ClientDisconnect`` when the client goes
    away, ``RuntimeError`` when the stream was read without being kept). A body that came in one
    message is that message's ``bytes`` object itself: ``Request.body()`` joins the chunks of its
    stream with the empty one that ends it, a copy of the whole body; several are joined once."""
    kept = getattr(request, "_body", None)
    if kept is not None:
        return kept
    if request._stream_consumed:
        raise RuntimeError("Stream consumed")
    chunks: list[bytes] = []
    while True:
        message = await request.receive()
        if message["type"] == "http.request":
            chunk = message.get("body", b"")
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        elif message["type"] == "http.disconnect":
            request._is_disconnected = True
            raise ClientDisconnect()
    request._stream_consumed = True
    body = chunks[0] if len(chunks) == 1 and type(chunks[0]) is bytes else b"".join(chunks)
    request._body = body  # where Request.body() and stream() look for a body read before
    return body


def query_parameter(request: Request, name: str) -> str | None:
    """``request.query_params.get(name)``, without parsing an empty query string."""
    return request.query_params.get(name) if request.scope.get("query_string") else None
