"""Files deploytool writes: atomically, and as JSON from its typed objects.

Standard library only: the state directory (deploy, journal, pointers) and the CLI's --json
use these, and neither must pay for pandas or jinja2 at start-up.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any


def to_jsonable(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(asdict(obj))
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    return obj


def write_atomic(path: Path, text: str | bytes) -> Path:
    """Write via a temporary file and rename, so a reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(text, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, mode) as handle:
        handle.write(text)
    os.chmod(tmp, 0o644)  # mkstemp makes 0600; reports and state are meant to be read
    os.replace(tmp, path)
    return path


def write_json(path: Path, obj: Any) -> Path:
    return write_atomic(path, json.dumps(to_jsonable(obj), indent=2) + "\n")
