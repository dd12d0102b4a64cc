"""The rules for calibrator names and aliases, and references to a version: ``name`` (latest),
``name@alias``, or a name with a pinned version. Request parsing and the store both use them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidInput

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
ALIAS_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
RESERVED_ALIASES = ("latest",)


def check_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise InvalidInput(
            f"invalid calibrator name {name[:80]!r}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_alias(alias: str) -> str:
    if not ALIAS_PATTERN.match(alias) or alias in RESERVED_ALIASES:
        raise InvalidInput(
            f"invalid alias {alias[:80]!r}: use 1-64 letters, digits, '_' or '-', starting with a "
            "letter ('latest' is reserved)"
        )
    return alias


@dataclass(frozen=True)
class Reference:
    """Which version a caller means: the latest of ``name``, its ``alias``, or ``version``."""

    name: str
    version: int | None = None
    alias: str | None = None

    @classmethod
    def parse(cls, text: str) -> Reference:
        """``name`` or ``name@alias``, each checked against its rule."""
        name, _, alias = text.partition("@")
        check_name(name)
        if alias:
            check_alias(alias)
        return cls(name, alias=alias or None)

    @classmethod
    def pinned(cls, name: str, version: int) -> Reference:
        return cls(check_name(name), version=version)
