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


# libyaml's parser where PyYAML was built with it: the same nodes, marks and safe constructor as
# the pure-Python parser at a tenth of its CPU. Every command that reads a profile parses the whole
# search path (15 files: 65 ms of CPU with the pure-Python parser, which parsed each file twice,
# once for the lines and once for the data; 5 ms now). A document libyaml refuses is parsed again
# by the pure-Python parser, so a refusal names the same problem at the same place as before.
_FAST_LOADER = getattr(yaml, "CSafeLoader", None)

# The nodes a document may reach, counting a node again each time an alias names it. YAML's
# aliases let a few hundred bytes name a tree of billions of nodes (each level an alias list of
# the one before); the parser keeps it small, as shared nodes, but every reader that walks the
# data (the line index, `extends:` merges, validation, a dump) expands it. A profile with `<<:`
# merges reaches a few hundred; the largest file deploytool reads (a version matrix) a few
# thousand.
MAX_EXPANDED_NODES = 100_000
# The characters of keys and scalars the aliases may add to what the file itself holds, counted
# the same way. A few values can name a great deal of text: one 200 KB scalar named 20,000 times
# is 4 GB once a reader expands it. A file without aliases reaches exactly its own size, so the
# bound is the file's size plus this: a large file is never refused for being large, and what a
# real profile shares by alias (a block of server args, a merged mapping) is kilobytes.
MAX_ALIASED_CHARS = 16 * 2**20


class AliasBomb(ValueError):
    """A document whose aliases expand past MAX_EXPANDED_NODES values (`chars` None) or past
    MAX_ALIASED_CHARS characters beyond the file's own (`chars` the bound)."""

    def __init__(self, chars: int | None = None) -> None:
        super().__init__(chars)
        self.chars = chars


def _parse(text: str, loader_class: Any) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """The document's data and the line of every key, from one parse (what yaml.safe_load and
    yaml.compose each did in full). The lines are read before the data is built: building it
    merges `<<` keys into the node."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        lines: dict[tuple[Any, ...], int] = {}
        if node is None:
            return None, lines
        _index_lines(node, (), lines, len(text) + MAX_ALIASED_CHARS)
        return loader.construct_document(node), lines
    finally:
        loader.dispose()


def _parse_fast_then_pure(text: str) -> tuple[Any, dict[tuple[Any, ...], int]]:
    if _FAST_LOADER is not None:
        try:
            return _parse(text, _FAST_LOADER)
        except yaml.YAMLError:
            pass  # the pure-Python parser's refusal names the problem and place as before
    return _parse(text, yaml.SafeLoader)


def load_yaml(path: Path) -> LocatedDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    try:
        data, lines = _parse_fast_then_pure(text)
    except AliasBomb as bomb:
        how_much = (
            f"{MAX_EXPANDED_NODES:,} values"
            if bomb.chars is None
            else f"{MAX_ALIASED_CHARS // 2**20} MiB of text beyond the file's own"
        )
        raise UsageError(
            f"{path}: its YAML aliases (*name) expand to more than {how_much}: "
            "refused before they are expanded",
            hint="write the repeated parts out, or share them with `extends:`; an alias of an alias "
            "of an alias multiplies at each level",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        raise UsageError(f"{where}: malformed YAML: {problem}") from None
    return LocatedDocument(path=path, data=data, lines=lines)


def _index_lines(
    node: yaml.Node, prefix: tuple[Any, ...], lines: dict[tuple[Any, ...], int], max_chars: int
) -> None:
    """The line of every key and item, walking the document as its readers will: through every
    alias, so its size is counted (AliasBomb past MAX_EXPANDED_NODES values or `max_chars`
    characters of keys and scalars) before anything expands it."""
    seen = chars = 0
    stack = [(node, prefix)]
    while stack:
        node, prefix = stack.pop()
        seen += 1
        if seen > MAX_EXPANDED_NODES:
            raise AliasBomb()
        lines.setdefault(prefix, node.start_mark.line + 1)
        if isinstance(node, yaml.ScalarNode):
            chars += len(node.value)
            if chars > max_chars:
                raise AliasBomb(max_chars)
        elif isinstance(node, yaml.MappingNode):
            chars += sum(
                len(key_node.value) for key_node, _ in node.value if isinstance(key_node, yaml.ScalarNode)
            )
            if chars > max_chars:
                raise AliasBomb(max_chars)
            for key_node, value_node in reversed(node.value):
                key = (*prefix, key_node.value)
                stack.append((value_node, key))
            for key_node, _ in node.value:
                lines[(*prefix, key_node.value)] = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*prefix, i)) for i, item in reversed(list(enumerate(node.value))))


def dump_yaml(data: Any) -> str:
    """Block-style YAML in the order the data was built, for files a person reads."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
