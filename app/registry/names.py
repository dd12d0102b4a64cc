"""The rules for calibrator names and aliases, and references to a version: ``name`` (latest),
``name@alias``, or a name with a pinned version. Request parsing and the store both use them.

A rule holds for the whole string (``re.fullmatch``: a ``$`` would let a trailing newline
through, which is then stored and breaks the ``Location`` header), and the length is checked
first, against the columns' widths, so an over-long name never reaches the database.
``ResolvedVersion`` is what a reference resolves to, passed from the registry to serving, the cache
and the prediction log."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..platform.errors import InvalidInput, NotFound

MAX_NAME_LENGTH = 128  # calibrators.name is VARCHAR(128)
MAX_ALIAS_LENGTH = 64  # aliases.alias is VARCHAR(64)
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
ALIAS_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
RESERVED_ALIASES = ("latest",)


def is_name(name: str) -> bool:
    """Whether ``name`` is a valid calibrator name: 1-128 ASCII letters, digits, '.', '_' or
    '-', starting with a letter or digit."""
    return len(name) <= MAX_NAME_LENGTH and NAME_PATTERN.fullmatch(name) is not None


def is_alias(alias: str) -> bool:
    """Whether ``alias`` is a valid alias: 1-64 ASCII letters, digits, '_' or '-', starting with
    a letter, and not reserved."""
    return (len(alias) <= MAX_ALIAS_LENGTH and ALIAS_PATTERN.fullmatch(alias) is not None
            and alias not in RESERVED_ALIASES)


def check_name(name: str) -> str:
    if not is_name(name):
        raise InvalidInput(
            f"invalid calibrator name {name[:80]!r}: use 1-{MAX_NAME_LENGTH} letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def check_alias(alias: str) -> str:
    if not is_alias(alias):
        raise InvalidInput(
            f"invalid alias {alias[:80]!r}: use 1-{MAX_ALIAS_LENGTH} letters, digits, '_' or '-', starting with "
            "a letter ('latest' is reserved)"
        )
    return alias


SHADOW_ALIAS = "shadow"  # a version scored on live traffic (evaluations) and never served to callers


def check_servable(reference: Reference) -> Reference:
    """A 404 for the ``shadow`` alias on calibrate and inference: a shadow version is scored on the
    labels of what the others served, never returned to a caller."""
    if reference.alias == SHADOW_ALIAS:
        raise NotFound(f"{reference.name}@{SHADOW_ALIAS} is scored on live traffic, never served: call an alias "
                       "or version that serves")
    return reference


@dataclass(frozen=True)
class Reference:
    """Which version a caller means: the latest of ``name``, its ``alias``, or ``version``; with
    ``v2_default``, an unversioned /v2 call: the alias the calibrator's settings name, else the latest."""

    name: str
    version: int | None = None
    alias: str | None = None
    v2_default: bool = False

    @classmethod
    def parse(cls, text: str) -> Reference:
        """``name`` or ``name@alias``, each checked against its rule (``name@`` names an empty
        alias, which is invalid, not the latest version)."""
        name, at, alias = text.partition("@")
        check_name(name)
        if at:
            check_alias(alias)
        return cls(name, alias=alias if at else None)

    @classmethod
    def pinned(cls, name: str, version: int) -> Reference:
        return cls(check_name(name), version=version)


@dataclass(frozen=True)
class ResolvedVersion:
    """The version a reference points at, with what is needed to load it (its row id) and to
    trust it (its checksum)."""

    name: str
    version: int
    checksum: str
    version_id: int
    calibrator_id: int = 0
    log_rate: float = 0.0  # share of calibrate requests the prediction log keeps (0: logging off)
