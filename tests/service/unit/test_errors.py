"""``app.platform.errors.refused_as``: the one place a core ``ValueError`` becomes a domain error."""

import pytest

from app.platform.errors import InvalidInput, MalformedRequest, NotFound, refused_as


def test_a_value_error_becomes_invalid_input_with_its_message_and_cause():
    with pytest.raises(InvalidInput) as caught, refused_as():
        raise ValueError("labels must be in [0, 3)")
    assert caught.value.detail == "labels must be in [0, 3)"
    assert caught.value.status == 422
    assert isinstance(caught.value.__cause__, ValueError)


def test_another_error_class_and_a_fixed_detail():
    with pytest.raises(MalformedRequest) as caught, refused_as(MalformedRequest):
        int("x")
    assert caught.value.detail == "invalid literal for int() with base 10: 'x'"
    with pytest.raises(InvalidInput) as caught, refused_as(detail="invalid page_token"):
        raise ValueError("Incorrect padding")
    assert caught.value.detail == "invalid page_token"


def test_other_exceptions_and_success_pass_through():
    with pytest.raises(NotFound), refused_as():
        raise NotFound("no calibrator 'a'")
    with pytest.raises(KeyError), refused_as():
        raise KeyError("a")
    with refused_as():
        value = 1 + 1
    assert value == 2
