"""Domain values read back from JSON: the checks and conversions that turn a stored request (a job's,
a refit policy's) into the frozen dataclass a service takes, and the JSON text of a time.

A value's ``to_dict()`` writes plain JSON (times as text by ``json_time``); ``entries_of(cls, data,
where)`` reads such a dict back, checking each entry against the annotation of the field of that
name: ``bool``, ``int``, ``float`` (an ``int`` is taken as a ``float``), ``str``, ``datetime`` (ISO 8601
text with an offset), ``Literal``, unions (``X | None``), ``list``, ``tuple``, ``dict`` and ``Any``.
An unknown or missing field, or an entry of the wrong type, is a ``ValueError`` that names the field
and ``where`` it was read from (a damaged stored request fails with a clear message)."""

from __future__ import annotations

import dataclasses
import types
import typing
from datetime import datetime
from typing import Any, Literal


def json_time(value: datetime) -> str:
    """``value`` as ISO 8601 text: microseconds when it has some, ``Z`` for an offset of exactly 0,
    else ``+HH:MM`` or ``-HH:MM`` (the offset's whole minutes), as pydantic writes a ``datetime`` in
    JSON mode."""
    text = value.replace(tzinfo=None).isoformat()
    offset = value.utcoffset()
    if offset is None:
        return text
    seconds = int(offset.total_seconds())
    if seconds == 0:
        return text + "Z"
    minutes = abs(seconds) // 60
    return f"{text}{'+' if seconds > 0 else '-'}{minutes // 60:02d}:{minutes % 60:02d}"


def aware(value: datetime | None, name: str) -> datetime | None:
    """``value`` unchanged; a ``ValueError`` when it is a time without an offset."""
    if value is not None and value.tzinfo is None:
        raise ValueError(f"{name} needs a UTC offset (e.g. 2026-11-23T00:00:00Z)")
    return value


def _checked(value: Any, hint: Any, where: str) -> Any:
    """``value`` converted to ``hint`` (a tuple from a list, a time from text), or ``ValueError``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in args:
            try:
                return _checked(value, option, where)
            except ValueError as exc:
                errors.append((option, exc))
        others = [exc for option, exc in errors if option is not type(None)]
        if value is not None and len(others) == 1:  # ``X | None``: why it is no ``X``
            raise others[0]
        raise ValueError(f"{where}: {value!r} is not {' or '.join(_named(a) for a in args)}")
    if origin is Literal:
        if value not in args or isinstance(value, bool) != any(isinstance(a, bool) for a in args):
            raise ValueError(f"{where}: {value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{where}: {value!r} is not a list")
        return [_checked(item, args[0], f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is tuple:
        kinds = args if Ellipsis not in args else (args[0],) * len(value) if isinstance(value, list | tuple) else ()
        if not isinstance(value, list | tuple) or len(value) != len(kinds):
            raise ValueError(f"{where}: {value!r} is not a list of {len(args)}")
        pairs = enumerate(zip(value, kinds, strict=True))
        return tuple(_checked(item, kind, f"{where}[{i}]") for i, (item, kind) in pairs)
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: {value!r} is not an object")
        return {_checked(key, args[0], where): _checked(item, args[1], f"{where}.{key}") for key, item in value.items()}
    if hint is type(None):
        if value is not None:
            raise ValueError(f"{where}: {value!r} is not null")
        return None
    if hint is datetime:
        if not isinstance(value, str):
            raise ValueError(f"{where}: {value!r} is not a time (ISO 8601 text)")
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{where}: {value!r} is not a time (ISO 8601 text)") from None
        return aware(parsed, where)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(hint, type) and isinstance(value, hint) and (hint is bool or not isinstance(value, bool)):
        return value
    raise ValueError(f"{where}: {value!r} is not {_named(hint)}")


def _named(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def entries_of(cls: type, data: Any, where: str) -> dict[str, Any]:
    """The entries of ``data`` (a dict from a value's ``to_dict``) checked against the fields of the
    dataclass ``cls``, ready for ``cls(**entries)``; defaults stand in for absent fields."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: {data!r} is not an object")
    fields = {field.name: field for field in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(map(str, unknown))}")
    hints = typing.get_type_hints(cls)
    entries = {}
    for name, field in fields.items():
        if name in data:
            entries[name] = _checked(data[name], hints[name], f"{where}: {name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ValueError(f"{where}: field {name!r} is missing")
    return entries
