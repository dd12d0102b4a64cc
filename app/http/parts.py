"""A response whose body is sent as the parts it was encoded in (a header, then views of the
arrays' own buffers), one ASGI body message each, under one ``Content-Length``: the server
writes each buffer to the socket as it is, so no joined copy of the body is ever made."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from starlette.responses import Response


class PartsResponse(Response):
    """``Response`` over a sequence of buffers (``bytes`` or ``memoryview``), or plain ``bytes``."""

    def __init__(self, content: bytes | Sequence[bytes | memoryview], status_code: int = 200,
                 headers: Mapping[str, str] | None = None, media_type: str | None = None):
        if isinstance(content, bytes | memoryview):
            content = (content,)
        self.parts = [part if isinstance(part, bytes) else memoryview(part).cast("B") for part in content]
        self.status_code, self.background = status_code, None
        if media_type is not None:
            self.media_type = media_type
        self.body = b""
        self.init_headers({**(headers or {}), "content-length": str(sum(len(part) for part in self.parts))})

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        last = len(self.parts) - 1
        for index, part in enumerate(self.parts):
            await send({"type": "http.response.body", "body": part, "more_body": index < last})
        if not self.parts:
            await send({"type": "http.response.body", "body": b""})
        if self.background is not None:
            await self.background()
