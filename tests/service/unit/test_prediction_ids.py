"""Client prediction ids are checked on the hot path as one joined string (``check_ids``): it accepts
and refuses exactly what a check of each id (``_check_each``) does, with the same message, for ids
near every rule's edge (empty, 128 and 129 characters, commas, spaces at either end or inside,
tabs, DEL, non-ASCII, the generated ids' form and near misses of it, repeats)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.platform.errors import InvalidInput
from app.prediction_log.service import MAX_ID_LENGTH, _check_each, check_ids, new_prefix

GENERATED_LIKE = st.builds(lambda digits, number, tail: digits + "-" + number + tail,
                           st.text("0123456789abcdefA", min_size=15, max_size=17),
                           st.sampled_from(["0", "1", "07", "123456789", "1234567890", "", "x"]),
                           st.sampled_from(["", "-", ".1", " "]))
IDS = st.one_of(
    st.text(st.sampled_from("ab9-_.:, \t\x7f\u00e9~"), max_size=6),
    GENERATED_LIKE,
    st.sampled_from(["a" * MAX_ID_LENGTH, "a" * (MAX_ID_LENGTH + 1), "", " ", ",", "a b", " a", "a ",
                     "550e8400-e29b-41d4-a716-446655440000"]),
)


def outcome(check, ids: list[str], n: int) -> str | None:
    try:
        check(ids, n)
    except InvalidInput as exc:
        return str(exc)
    return None


@settings(max_examples=400, deadline=None)
@given(st.lists(IDS, max_size=8))
@example(["a", "b"])
@example([new_prefix() + "3", "b"])
@example(["b", "0123456789abcdef-0"])
@example(["0123456789abcdef-0x"])
@example(["a,b"])
def test_the_joined_check_agrees_with_a_check_of_each_id(ids):
    assert outcome(check_ids, ids, len(ids)) == outcome(_check_each, ids, len(ids))


def test_one_id_a_row():
    with pytest.raises(InvalidInput, match="ids has 2 entries for 3 rows"):
        check_ids(["a", "b"], 3)


@pytest.mark.parametrize(("ids", "fault"), [
    (["a", "a"], "distinct"), (["a", ""], "printable ASCII"), (["a,b"], "printable ASCII"),
    (["x" * (MAX_ID_LENGTH + 1)], "printable ASCII"), (["tab\there"], "printable ASCII"),
    (["caf\u00e9"], "printable ASCII"), (["0123456789abcdef-12"], "reserved"),
])
def test_each_fault_is_refused_and_named(ids, fault):
    with pytest.raises(InvalidInput, match=fault):
        check_ids(ids, len(ids))


def test_ids_that_keep_every_rule_pass():
    ids = ["550e8400-e29b-41d4-a716-446655440000", "x" * MAX_ID_LENGTH, "a b", "0123456789abcdef-",
           "0123456789abcdeF-1", "0123456789abcdef-01", "0123456789abcdef-1234567890"]
    check_ids(ids, len(ids))
