"""``app.names``: the name and alias rules and the one parse of a reference."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import InvalidInput
from app.names import Reference, check_alias, check_name

NAMES = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
ALIASES = st.from_regex(r"\A[A-Za-z][A-Za-z0-9_-]{0,63}\Z").filter(lambda a: a != "latest")


@given(NAMES, ALIASES)
def test_a_reference_is_its_name_and_alias(name, alias):
    assert Reference.parse(name) == Reference(name)
    assert Reference.parse(f"{name}@{alias}") == Reference(name, alias=alias)
    assert Reference.pinned(name, 7) == Reference(name, version=7)


@pytest.mark.parametrize("name", ["", "-lead", "a/b", "x" * 129, "naïve", "a b"])
def test_names_outside_the_rule_are_invalid(name):
    with pytest.raises(InvalidInput, match="invalid calibrator name"):
        check_name(name)
    with pytest.raises(InvalidInput):
        Reference.parse(f"{name}@production")


@pytest.mark.parametrize("alias", ["latest", "1st", "a.b", "x" * 65])
def test_aliases_outside_the_rule_are_invalid(alias):
    with pytest.raises(InvalidInput, match="invalid alias"):
        check_alias(alias)
    with pytest.raises(InvalidInput, match="invalid alias"):
        Reference.parse(f"demo@{alias}")
