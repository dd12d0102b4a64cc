"""The body's deadline (``app.http.middleware._within``): a receive past it is a 408
(``BodyTooSlow``); any other cancellation stays a cancellation, and a message in time is returned."""

from __future__ import annotations

import asyncio

import pytest

from app.http.middleware import BodyTooSlow, _within


async def never():
    await asyncio.sleep(3600)


async def at_once():
    return {"type": "http.request", "body": b"x", "more_body": False}


def test_a_receive_past_the_deadline_is_a_408_and_one_in_time_returns_its_message():
    async def main():
        with pytest.raises(BodyTooSlow) as caught:
            await _within(never, 0.05, 60.0)
        assert caught.value.status == 408 and "60 s" in caught.value.detail
        assert asyncio.current_task().cancelling() == 0  # the timer's cancel was taken back
        assert (await _within(at_once, 0.05, 60.0))["body"] == b"x"
        await asyncio.sleep(0.1)  # the timer was cancelled: nothing cancels this task later

    asyncio.run(main())


def test_a_cancellation_from_elsewhere_is_not_a_408():
    async def main():
        task = asyncio.create_task(_within(never, 30.0, 60.0))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
