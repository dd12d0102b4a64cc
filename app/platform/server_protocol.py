"""uvicorn's HTTP protocol (httptools, as uvicorn picks it; h11 where httptools is missing) with a
deadline on the request head: a connection that has not sent a
complete head ``CALIBRATION_HEADER_SECONDS`` after it opened (or, kept alive, after it began its
next request) is closed. Without it, 1100 connections that each sent half a head held their file
descriptors and every slot of ``CALIBRATION_MAX_CONNECTIONS`` for as long as their clients
liked, and every good request got 503 (the body deadline, ``CALIBRATION_BODY_SECONDS``, starts
only once a head is complete)."""

from __future__ import annotations

import asyncio

from ..settings import get_settings

try:  # the parser uvicorn's "auto" picks: much faster than h11
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as BaseProtocol
except ImportError:  # pragma: no cover - uvicorn without its [standard] extra
    # (mypy: a second class under the same name; both are uvicorn's HTTP protocol)
    from uvicorn.protocols.http.h11_impl import H11Protocol as BaseProtocol  # type: ignore[assignment]


class HeadDeadlineProtocol(BaseProtocol):
    _head_timer: asyncio.TimerHandle | None = None

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(get_settings().header_seconds, self._head_late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self._waiting_for_head() and not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._waiting_for_head():
            self._arm()  # a kept-alive connection beginning its next head: the deadline runs again
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle and not self._waiting_for_head():
            self._disarm()  # the head is complete

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
