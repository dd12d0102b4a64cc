"""The body's deadline (``app.http.middleware.BodyDeadline``): a receive past it is a 408
(``BodyTooSlow``), also when it passed between two receives; any other cancellation stays a
cancellation; a message in time is returned; one timer serves the whole body and is gone when the
body is in."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.http.middleware import BodyDeadline, BodyTooSlow


async def never():
    await asyncio.sleep(3600)


async def at_once():
    return {"type": "http.request", "body": b"x", "more_body": False}


def test_a_receive_past_the_deadline_is_a_408_and_one_in_time_returns_its_message():
    async def main():
        with pytest.raises(BodyTooSlow) as caught:
            await BodyDeadline(time.perf_counter() + 0.05, 60.0).receive(never)
        assert caught.value.status == 408 and "60 s" in caught.value.detail
        assert asyncio.current_task().cancelling() == 0  # the timer's cancel was taken back
        deadline = BodyDeadline(time.perf_counter() + 0.05, 60.0)
        assert (await deadline.receive(at_once))["body"] == b"x"
        deadline.done()
        await asyncio.sleep(0.1)  # the timer was cancelled: nothing cancels this task later

    asyncio.run(main())


def test_one_timer_serves_every_message_and_a_deadline_passed_between_receives_is_a_408():
    async def main():
        deadline = BodyDeadline(time.perf_counter() + 0.05, 60.0)
        await deadline.receive(at_once)
        timer = deadline.timer
        await deadline.receive(at_once)
        assert deadline.timer is timer and not timer.cancelled()
        await asyncio.sleep(0.1)  # the deadline passes while the app is not waiting in receive
        assert asyncio.current_task().cancelling() == 0  # so nothing was cancelled
        with pytest.raises(BodyTooSlow):
            await deadline.receive(at_once)
        deadline.done()
        assert timer.cancelled()

    asyncio.run(main())


def test_a_cancellation_from_elsewhere_is_not_a_408():
    async def main():
        task = asyncio.create_task(BodyDeadline(time.perf_counter() + 30.0, 60.0).receive(never))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
