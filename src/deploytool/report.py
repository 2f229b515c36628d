"""Shared report plumbing: atomic JSON files, Markdown and self-contained HTML pages.

qualify and bench each have their own report module that decides *what* to show; this module
is *how* a report is written, so both look alike and a half-written file never appears.
"""

from __future__ import annotations

import base64
import io
import json
import os
import tempfile
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("deploytool", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


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


def render(template: str, **context: Any) -> str:
    """Render templates/<template> (HTML ones get the shared page styles)."""
    return _TEMPLATES.get_template(template).render(**context)


def table_markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "_(no rows)_"
    return frame.to_markdown(index=False)


def table_html(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p><em>(no rows)</em></p>"
    return frame.to_html(index=False, border=0, classes="table", na_rep="–", escape=True)


def figure_data_uri(figure: Any) -> str:
    """A matplotlib figure as an inline PNG, so report.html needs no other file."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
