"""Dataclasses to JSON values and back: one codec for every message between the orchestrator and a
host's processes (the agents' verbs, the trial worker's trials, a calibration) and for the run's
files' typed sections, so no type writes its own `to_json` or field-by-field copy.

A message is a dataclass (a `Message`, or any dataclass inside one); its JSON is an object with a key
per field, nested dataclasses, lists, tuples and dicts included. A type of the project that already
travels as JSON (`LinkSpec`, `ReplayPlan`: an `as_dict` and a `from_dict`) keeps its own form, so the
wire stays what it was before these types existed.

Decoding is strict where a mismatch is a bug: a key the type has no field for, a field with no key
and no default, or a value of another kind (a string for a number, a list for an object) raises
`TypeError`. A field made with `omitted` is left out of the JSON when its value says "nothing" (an
optional key is absent, not null), and takes its default when the key is absent.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

_OMIT = "omit_from_json"
_WHEN_DEFAULT = object()  # `omitted` without `when`: left out when the value is the default
_SCALARS = {bool: (bool,), int: (int, float), float: (int, float), str: (str,)}


def omitted(default: Any = None, when: Callable[[Any], bool] | None = None) -> Any:
    """A field left out of the JSON when `when(message)` holds (without `when`: when its value is
    `default`), and `default` when the JSON has no key for it: how an optional key stays absent."""
    return dataclasses.field(default=default, metadata={_OMIT: when or _WHEN_DEFAULT})


class Message:
    """A dataclass that crosses the boundary between orchestrator and host as JSON."""

    __slots__ = ()

    def to_json(self) -> dict:
        return encode(self)

    @classmethod
    def from_json(cls, data: Any) -> Any:
        return decode(cls, data)


def _left_out(message: Any, field: dataclasses.Field, value: Any) -> bool:
    when = field.metadata.get(_OMIT)
    if when is None:
        return False
    return value == field.default if when is _WHEN_DEFAULT else bool(when(message))


def _self_coded(kind: Any) -> bool:
    """A type that travels by its own `as_dict` / `from_dict`."""
    return isinstance(kind, type) and hasattr(kind, "as_dict") and hasattr(kind, "from_dict")


def encode(value: Any) -> Any:
    """`value` as a JSON value: dataclasses as objects (their `omitted` fields left out where they
    hold nothing), tuples as lists; anything else as it is (`json.dumps` refuses what is not JSON)."""
    if _self_coded(type(value)):
        return value.as_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode_fields(value)
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    return value


def encode_fields(value: Any) -> dict:
    """A dataclass's fields as a JSON object (what `encode` gives a dataclass without its own form;
    such a type's `as_dict` may start from it)."""
    return {
        f.name: encode(v)
        for f in dataclasses.fields(value)
        if not _left_out(value, f, v := getattr(value, f.name))
    }


@cache
def _fields(kind: type) -> dict[str, Any]:
    """A dataclass's fields and their types (annotations resolved once per type)."""
    hints = get_type_hints(kind)
    return {f.name: hints[f.name] for f in dataclasses.fields(kind) if f.init}


def _mismatch(kind: Any, data: Any) -> TypeError:
    return TypeError(f"expected {getattr(kind, '__name__', kind)}, not {data!r:.200}")


def decode(kind: Any, data: Any) -> Any:
    """The JSON value `data` as `kind` (a dataclass, `list[...]`, `tuple[...]`, `dict[str, ...]`,
    `X | None`, a scalar or `Any`); raises TypeError where it does not fit (see the module)."""
    if kind is Any:
        return data
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType):
        if data is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"no JSON form for {kind!r}: a union is of one type and None")
        return decode(rest[0], data)
    if origin in (list, tuple) or kind in (list, tuple):
        if not isinstance(data, list):
            raise _mismatch(kind, data)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(data):
                raise _mismatch(kind, data)
            return tuple(decode(a, d) for a, d in zip(args, data, strict=True))
        items = [decode(args[0] if args else Any, d) for d in data]
        return tuple(items) if tuple in (origin, kind) else items
    if origin is dict or kind is dict:
        if not isinstance(data, dict):
            raise _mismatch(kind, data)
        value = args[1] if args else Any
        return {k: decode(value, v) for k, v in data.items()}
    if _self_coded(kind):
        if not isinstance(data, dict):
            raise _mismatch(kind, data)
        return kind.from_dict(data)
    if dataclasses.is_dataclass(kind):
        return decode_fields(kind, data)
    return _scalar(kind, data)


def decode_fields(kind: type, data: Any) -> Any:
    """A JSON object as the dataclass `kind`, field by field (what `decode` does for a dataclass
    without its own form; such a type's `from_dict` may end with it)."""
    if not isinstance(data, dict):
        raise _mismatch(kind, data)
    fields = _fields(kind)
    # a key with no field goes to the constructor as it is: its TypeError names the key
    return kind(**{k: decode(fields[k], v) if k in fields else v for k, v in data.items()})


def _scalar(kind: Any, data: Any) -> Any:
    if kind is type(None) or kind is None:
        if data is not None:
            raise _mismatch(None, data)
        return None
    allowed = _SCALARS.get(kind)
    if allowed is None:
        raise TypeError(f"no JSON form for {kind!r}")
    if not isinstance(data, allowed) or (kind is not bool and isinstance(data, bool)):
        raise _mismatch(kind, data)
    return data
