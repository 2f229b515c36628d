"""The one YAML loader: data plus the line of every key, so errors can say file:line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import UsageError


@dataclass
class LocatedDocument:
    path: Path
    data: Any
    # ("server", "args", "tp-size") -> 1-based line of that key (or list item)
    lines: dict[tuple[Any, ...], int] = field(default_factory=dict)

    def where(self, location: tuple[Any, ...]) -> str:
        """'file:line' for the deepest known prefix of a location."""
        for cut in range(len(location), -1, -1):
            line = self.lines.get(tuple(location[:cut]))
            if line is not None:
                return f"{self.path}:{line}"
        return str(self.path)


def load_yaml(path: Path) -> LocatedDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    # One parse: the data is constructed from the same node tree whose lines are indexed, as
    # yaml.safe_load would construct it from its own parse (which was a second pure-Python parse
    # of every file). The lines are read first, since constructing flattens merge keys in the
    # tree; a key the index cannot hold (a list) is an error only if the data is constructed, as
    # the constructor's own error about it comes first.
    lines: dict[tuple[Any, ...], int] = {}
    unindexable: TypeError | None = None
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                try:
                    _index_lines(node, (), lines)
                except TypeError as exc:
                    unindexable = exc
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise UsageError(f"{where}: malformed YAML: {problem}") from None
    if unindexable is not None:
        raise unindexable
    return LocatedDocument(path=path, data=data, lines=lines)


def _index_lines(node: yaml.Node, prefix: tuple[Any, ...], lines: dict[tuple[Any, ...], int]) -> None:
    lines.setdefault(prefix, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = (prefix + (key_node.value,))
            lines[key] = key_node.start_mark.line + 1
            _index_lines(value_node, key, lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index_lines(item, prefix + (i,), lines)


def dump_yaml(data: Any) -> str:
    """Block-style YAML in the order the data was built, for files a person reads."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
