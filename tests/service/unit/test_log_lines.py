"""``first_line``: one line of an exception's message for a log entry, where ``str(exc).splitlines()[0]``
raised IndexError for an exception without a message (a bare ``MemoryError()``: the prediction log's
writer thread died on it, found by review)."""

from __future__ import annotations

from sqlalchemy.exc import OperationalError

from app.platform.logs import first_line


def test_the_first_line_of_a_message_or_the_exception_s_repr_when_it_has_none():
    assert first_line(ValueError("first\nsecond")) == "first"
    assert first_line(MemoryError()) == "MemoryError()"
    assert first_line(ValueError("")) == "ValueError('')"
    error = OperationalError("INSERT ...", {}, Exception("database is locked"))
    assert first_line(error) == str(error).splitlines()[0] == "(builtins.Exception) database is locked"
