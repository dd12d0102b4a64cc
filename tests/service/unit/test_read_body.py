"""``app.http.body.read_body`` reads what Starlette's ``Request.body()`` reads, raises what it
raises, keeps the body where ``Request.body()`` finds it, and hands a one-message body over as the
message's own bytes (no copy); ``query_parameter`` reads what ``request.query_params.get`` reads."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import ClientDisconnect, Request

from app.http.body import query_parameter, read_body

SCOPE = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}


def receiving(messages: list[dict]):
    queue = list(messages)

    async def receive():
        return queue.pop(0)

    return receive


def both(messages: list[dict], scope: dict | None = None):
    """(read_body's result, Request.body()'s result) on two requests given the same messages."""
    async def main():
        ours = Request(scope or SCOPE, receiving(messages))
        theirs = Request(scope or SCOPE, receiving(messages))
        return await read_body(ours), await theirs.body(), ours

    return asyncio.run(main())


def test_one_message_is_its_own_bytes_and_kept_for_request_body():
    payload = bytes(range(256)) * 1024
    message = {"type": "http.request", "body": payload, "more_body": False}
    ours, theirs, request = both([message])
    assert ours == theirs == payload
    assert ours is payload  # not a copy
    assert asyncio.run(request.body()) is payload  # Request.body() later: the same, not read again


@pytest.mark.parametrize("chunks", [[b"ab", b"", b"cd", b"e"], [b"", b""], [b""], [b"x", b""]])
def test_several_messages_are_joined_as_request_body_joins_them(chunks):
    messages = [{"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
                for i, chunk in enumerate(chunks)]
    ours, theirs, _ = both(messages)
    assert ours == theirs == b"".join(chunks)
    assert type(ours) is bytes


def test_a_message_without_a_body_is_empty():
    ours, theirs, _ = both([{"type": "http.request"}])
    assert ours == theirs == b""


def test_a_disconnect_is_a_client_disconnect_and_a_read_stream_a_runtime_error():
    async def main():
        request = Request(SCOPE, receiving([{"type": "http.request", "body": b"a", "more_body": True},
                                            {"type": "http.disconnect"}]))
        with pytest.raises(ClientDisconnect):
            await read_body(request)
        assert await request.is_disconnected()
        streamed = Request(SCOPE, receiving([{"type": "http.request", "body": b"a", "more_body": False}]))
        assert [chunk async for chunk in streamed.stream()] == [b"a", b""]
        with pytest.raises(RuntimeError, match="Stream consumed"):
            await read_body(streamed)

    asyncio.run(main())


@pytest.mark.parametrize("query", [b"", b"dtype=float32", b"dtype=float32&dtype=float64", b"other=1", b"dtype=",
                                   b"dtype=%66loat32"])
def test_query_parameter_is_what_query_params_says(query):
    request = Request({**SCOPE, "query_string": query})
    assert query_parameter(request, "dtype") == request.query_params.get("dtype")
