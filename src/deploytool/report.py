"""Shared report plumbing: atomic JSON files, Markdown and self-contained HTML pages.

qualify and bench each have their own report module that decides *what* to show; this module
is *how* a report is written, so both look alike and a half-written file never appears.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import jinja2
import pandas as pd

# Report writers write their files through these (atomic; JSON from typed objects).
from .files import to_jsonable, write_atomic, write_json  # noqa: F401  (re-exported)

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("deploytool", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


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
