"""The functions (and methods) in a tree longer than N lines, longest first.

python scripts/long_functions.py src 80
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def long_functions(root: Path, limit: int) -> list[tuple[int, str, str]]:
    """(lines, file:line, name) of each function over `limit` lines, longest first."""
    rows = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    rows.append((lines, f"{path}:{node.lineno}", node.name))
    return sorted(rows, reverse=True)


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "src")
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 80
    rows = long_functions(root, limit)
    for lines, where, name in rows:
        print(f"{lines:4d}  {where}  {name}")
    print(f"{len(rows)} functions over {limit} lines")


if __name__ == "__main__":
    main()
