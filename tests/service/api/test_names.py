"""``app.names``: the name and alias rules and the one parse of a reference."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.platform.errors import InvalidInput
from app.registry.names import Reference, check_alias, check_name

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


@pytest.mark.parametrize("name", ["demo\n", "a" * 128 + "\n", "\ndemo", "de\nmo"])
def test_a_name_matches_its_rule_on_the_whole_string(name):
    with pytest.raises(InvalidInput, match="invalid calibrator name") as raised:
        check_name(name)
    assert raised.value.detail.startswith(f"invalid calibrator name {name[:80]!r}: use 1-128 letters")
    with pytest.raises(InvalidInput, match="invalid calibrator name"):
        Reference.parse(name)


@pytest.mark.parametrize("alias", ["production\n", "a" * 64 + "\n", "", "a" * 65])
def test_an_alias_matches_its_rule_on_the_whole_string(alias):
    with pytest.raises(InvalidInput) as raised:
        Reference.parse(f"demo@{alias}")
    assert raised.value.detail == (f"invalid alias {alias!r}: use 1-64 letters, digits, '_' or '-', starting "
                                   "with a letter ('latest' is reserved)")


L = [[2.0, 0.5, -1.0], [0.1, 1.5, 0.3], [-0.5, 0.2, 2.2], [1.0, 1.1, 0.9]]
FIT = {"method": "temperature", "logits": L, "labels": [0, 1, 2, 0]}


def test_names_and_aliases_outside_the_rule_never_reach_the_database(client):
    """A trailing newline used to pass ``$`` and be stored (then the Location header broke the
    response); on Postgres an over-long name or alias was a 500 from the database."""
    for name in ("a\n", "a" * 128 + "\n", "a" * 129):
        response = client.post(f"/v1/calibrators/{quote(name)}/versions", json=FIT)
        assert response.status_code == 422, response.text
        assert response.json()["detail"].startswith(f"invalid calibrator name {name[:80]!r}: use 1-128")
    assert client.get("/v1/calibrators").json()["calibrators"] == []
    assert client.post("/v1/calibrators/demo/versions", json=FIT).status_code == 201
    for alias in ("prod\n", "a" * 64 + "\n", "a" * 65):
        response = client.put(f"/v1/calibrators/demo/aliases/{quote(alias)}", json={"version": 1})
        assert response.status_code == 422, response.text
        assert response.json()["detail"].startswith(f"invalid alias {alias!r}: use 1-64")
    assert client.get("/v1/calibrators/demo").json()["aliases"] == {}


def test_an_empty_alias_is_invalid_not_the_latest_version(client):
    assert client.post("/v1/calibrators/demo/versions", json=FIT).status_code == 201
    response = client.post("/v1/calibrators/demo@/calibrate", json={"logits": L})
    assert response.status_code == 422
    assert response.json()["detail"].startswith("invalid alias '': use 1-64 letters")
    response = client.post("/v1/calibrators/demo@/report", json={"logits": L, "labels": [0, 1, 2, 0]})
    assert response.status_code == 422 and response.json()["detail"].startswith("invalid alias ''")


@pytest.mark.parametrize("version", ["١", "²", "１", "1" * 5000, "+1", " 1"])
def test_a_v2_version_is_ascii_digits_or_a_404(client, version):
    """'١' (Arabic-Indic one) passed ``str.isdigit`` and served version 1; '²' passed it and
    ``int`` refused it (a 500); 5000 digits exceed ``int``'s limit (a 500)."""
    assert client.post("/v1/calibrators/demo/versions", json=FIT).status_code == 201
    quoted = quote(version)
    for method, path in (("GET", f"/v2/models/demo/versions/{quoted}"),
                         ("GET", f"/v2/models/demo/versions/{quoted}/ready"),
                         ("POST", f"/v2/models/demo/versions/{quoted}/infer")):
        body = {"inputs": [{"name": "logits", "shape": [1, 3], "datatype": "FP64", "data": [1, 2, 3]}]}
        response = client.request(method, path, json=body if method == "POST" else None)
        assert response.status_code == 404, (path, response.text)
        assert response.json() == {"error": f"no model version {version[:80]!r}"}
    assert client.get("/v2/models/demo/versions/1").status_code == 200
