"""The heavy-request work pool keeps nothing of a finished call: a work thread used to hold its last
task's arguments (a fit's whole request body) until it got another one, so five appends of a
large validation set left 191 MiB resident."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

import numpy as np
import pytest

from app.http.admission import WorkPool


def test_a_finished_call_s_arguments_and_result_are_not_kept_by_the_work_threads():
    pool = WorkPool(threads=2, waiting=2)

    async def submit():
        body = np.ones(1 << 20)
        seen = weakref.ref(body)
        result = await pool.run(lambda array: array * 2, body)
        produced = weakref.ref(result)
        assert result[0] == 2.0
        del body, result
        return seen, produced

    async def fails():
        body = np.ones(1 << 20)
        seen = weakref.ref(body)

        def refuse(array):
            raise ValueError("refused")

        with pytest.raises(ValueError, match="refused"):
            await pool.run(refuse, body)
        del body
        return seen

    try:
        seen, produced = asyncio.run(submit())
        refused = asyncio.run(fails())
        # the request has its answer once the work thread hands it over, a moment before that thread
        # has left the call and dropped its task: wait for that moment (the old loop kept the task
        # until the thread's next one, which never comes here)
        deadline = time.monotonic() + 5
        while any(ref() is not None for ref in (seen, produced, refused)) and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.01)
        assert seen() is None and produced() is None and refused() is None
    finally:
        pool.shutdown()
