"""Reading YAML configuration with the file and line of every value, so errors can point at them.

Inventory, experiment, device-profile and power files are all read through `load_yaml` and
`Section`; each is validated once, at the edge, and turned into typed dataclasses that the rest of
the code trusts. The control machine and the analysis read such files; hosts never import this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from contracts.errors import UserError

_MISSING = object()


def load_yaml(path: Path, what: str) -> Section:
    """Parse `path` and return its top-level mapping as a Section that remembers line numbers."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise UserError(
            f"{what} {path} does not exist", f"create it or pass the path of an existing {what}"
        ) from None
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{what} {path} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})",
            "save the file as UTF-8",
        ) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}: malformed YAML: {problem}", f"fix the {what}'s syntax") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a {what} must be a mapping of keys to values", f"see the example {what}")
    return Section(Path(path), what, (), data, node)


class Section:
    """A mapping read from YAML, with typed getters that raise UserError naming file, line and key."""

    def __init__(self, path: Path, what: str, keys: tuple[str, ...], data: dict, node: Any) -> None:
        self.path, self.what, self.keys, self.data, self.node = path, what, keys, data, node

    def _line(self, key: str | None = None) -> int | None:
        node = self.node
        if node is None:
            return None
        if key is not None and isinstance(node, yaml.MappingNode):
            for k, _ in node.value:
                if k.value == str(key):
                    return k.start_mark.line + 1
        return node.start_mark.line + 1

    def dotted(self, key: str | None = None) -> str:
        parts = [*self.keys, str(key)] if key is not None else list(self.keys)
        return ".".join(parts) or "(top level)"

    def error(self, key: str | None, problem: str, fix: str | None = None) -> UserError:
        line = self._line(key)
        where = f"{self.path}:{line}" if line else str(self.path)
        return UserError(f"{where}: {self.what} key '{self.dotted(key)}': {problem}", fix)

    def reject_unknown(self, allowed: set[str]) -> None:
        for key in self.data:
            if key not in allowed:
                raise self.error(str(key), "unknown key", f"use one of: {', '.join(sorted(allowed))}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self.data or self.data[key] is None:
            if default is _MISSING:
                raise self.error(key, "is missing", f"add '{key}' to the {what_of(self)}")
            return default
        return self.data[key]

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
        value = self.raw(key, default)
        if value is default and default is not _MISSING:
            return value
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            raise self.error(key, f"{value!r} is not a {' or '.join(k.__name__ for k in kinds)}")
        if float in kinds and isinstance(value, int):
            return value
        if not isinstance(value, kinds):
            raise self.error(key, f"{value!r} is not a {' or '.join(k.__name__ for k in kinds)}")
        return value

    def section(self, key: str, default_empty: bool = False) -> Section:
        if default_empty and key not in self.data:
            return Section(self.path, self.what, (*self.keys, key), {}, None)
        value = self.raw(key)
        if not isinstance(value, dict):
            raise self.error(key, "must be a mapping of keys to values")
        return Section(self.path, self.what, (*self.keys, key), value, self._child_node(key))

    def sections(self, key: str) -> list[Section]:
        """A list of mappings, e.g. the hosts of an inventory."""
        value = self.raw(key)
        if not isinstance(value, list):
            raise self.error(key, "must be a list")
        child = self._child_node(key)
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.error(key, f"item {i + 1} must be a mapping of keys to values")
            item_node = child.value[i] if isinstance(child, yaml.SequenceNode) else None
            out.append(Section(self.path, self.what, (*self.keys, f"{key}[{i}]"), item, item_node))
        return out

    def _child_node(self, key: str) -> Any:
        if isinstance(self.node, yaml.MappingNode):
            for k, v in self.node.value:
                if k.value == str(key):
                    return v
        return None


def what_of(section: Section) -> str:
    return f"{section.what} ({section.path})"
