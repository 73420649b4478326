"""The one dataclass<->JSON codec (`contracts.message`): strict where a mismatch is a bug, and
optional keys absent rather than null."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from contracts.message import Message, decode, encode, omitted
from contracts.profiles import LinkSpec


@dataclass(frozen=True)
class Inner:
    rate: float
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outer(Message):
    name: str
    inners: list[Inner]
    by_key: dict[str, int] = field(default_factory=dict)
    link: LinkSpec | None = None  # a type with its own JSON form
    note: str | None = omitted()


def test_a_dataclass_round_trips_with_its_nested_types():
    value = Outer("o", [Inner(1, ("a",)), Inner(2.5)], {"x": 1}, LinkSpec(10**7, 10**7))
    data = value.to_json()
    assert data["inners"] == [{"rate": 1, "tags": ["a"]}, {"rate": 2.5, "tags": []}]
    assert data["link"] == LinkSpec(10**7, 10**7).as_dict() and "note" not in data  # omitted: absent
    assert Outer.from_json(data) == value
    assert decode(Outer, {**data, "note": "n"}).note == "n"
    assert encode(Outer("o", [], note="n"))["note"] == "n"


@pytest.mark.parametrize(
    "data, named",
    [
        ({"name": "o", "inners": [], "extra": 1}, "extra"),  # a key with no field
        ({"inners": []}, "name"),  # a field with no key and no default
        ({"name": 1, "inners": []}, "str"),
        ({"name": "o", "inners": {}}, "list"),
        ({"name": "o", "inners": [{"rate": "1"}]}, "float"),
        ({"name": "o", "inners": [], "by_key": {"x": True}}, "int"),  # a bool is not a number
    ],
)
def test_what_does_not_fit_is_a_type_error_naming_it(data, named):
    with pytest.raises(TypeError, match=named):
        Outer.from_json(data)
