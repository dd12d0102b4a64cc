"""The bodies' deadlines (``app.http.middleware.BodyDeadlines``): a receive still waiting at its
deadline is a 408 (``BodyTooSlow``) within the check's interval; a body already there is handed over
even after it; any other cancellation stays a cancellation; one check a loop serves every waiting
receive, stops when none waits, and keeps no closed loop alive."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

import pytest

from app.http.middleware import BodyDeadlines, BodyTooSlow


async def never():
    await asyncio.sleep(3600)


async def at_once():
    return {"type": "http.request", "body": b"x", "more_body": False}


def test_a_receive_past_the_deadline_is_a_408_and_one_in_time_returns_its_message():
    async def main():
        deadlines = BodyDeadlines(0.2)  # checked every 0.05 s
        start = time.perf_counter()
        with pytest.raises(BodyTooSlow) as caught:
            await deadlines.receive(never, start + 0.2)
        assert 0.2 <= time.perf_counter() - start < 0.2 + 0.05 + 0.5  # the interval, and slack for a busy machine
        assert caught.value.status == 408 and "0.2 s" in caught.value.detail
        assert asyncio.current_task().cancelling() == 0  # the check's cancel was taken back
        assert (await deadlines.receive(at_once, time.perf_counter() + 0.2))["body"] == b"x"
        await asyncio.sleep(0.5)  # nothing cancels this task later, and the check has stopped
        waits = deadlines._waits(asyncio.get_running_loop())
        assert not waits.waiting and not waits.expired and not waits.checking

    asyncio.run(main())


def test_a_body_the_server_holds_is_handed_over_after_the_deadline_and_a_wait_past_it_is_a_408():
    """Only waiting counts: an app that reads late gets the body its client sent in time."""
    async def main():
        deadlines = BodyDeadlines(0.2)
        assert (await deadlines.receive(at_once, time.perf_counter() - 1))["body"] == b"x"
        with pytest.raises(BodyTooSlow):
            await deadlines.receive(never, time.perf_counter() - 1)

    asyncio.run(main())


def test_one_check_serves_many_waiting_receives_each_at_its_own_deadline():
    async def main():
        deadlines = BodyDeadlines(0.4)  # checked every 0.1 s
        now = time.perf_counter()
        early = asyncio.create_task(deadlines.receive(never, now + 0.15))
        late = asyncio.create_task(deadlines.receive(never, now + 30))
        with pytest.raises(BodyTooSlow):
            await early
        assert not late.done()
        waits = deadlines._waits(asyncio.get_running_loop())
        assert list(waits.waiting) == [late] and waits.checking
        late.cancel()
        with pytest.raises(asyncio.CancelledError):  # a cancellation from elsewhere is not a 408
            await late
        assert not waits.waiting

    asyncio.run(main())


def test_each_loop_has_its_own_check_and_a_closed_loop_is_not_kept():
    """An app served on one loop after another (a test client, then the next) keeps its deadlines,
    and holds none of the loops it ran on once they are closed, a check still pending included."""
    deadlines = BodyDeadlines(0.2)
    loops = []
    for _ in range(3):
        async def main():
            loops.append(weakref.ref(asyncio.get_running_loop()))
            with pytest.raises(BodyTooSlow):
                await deadlines.receive(never, time.perf_counter() + 0.1)
            await deadlines.receive(at_once, time.perf_counter() + 1)  # leaves a check scheduled

        asyncio.run(main())
    gc.collect()
    assert [loop() for loop in loops] == [None, None, None]
    assert len(deadlines._loops) == 0
