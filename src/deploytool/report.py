"""Shared report plumbing: atomic JSON files, Markdown and self-contained HTML pages.

qualify and bench each have their own report module that decides *what* to show; this module
is *how* a report is written, so both look alike and a half-written file never appears.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

import jinja2
import pandas as pd

from . import __version__

# Report writers write their files through these (atomic; JSON from typed objects).
from .files import to_jsonable, write_atomic, write_json  # noqa: F401  (re-exported)

# Every HTML template is escaped: the names end in `.html.j2`, which select_autoescape's plain
# "html" does not match. A report shows what a server said, and the server may be hostile.
_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("deploytool", "templates"),
    autoescape=jinja2.select_autoescape(
        ["html", "html.j2"], disabled_extensions=["md", "md.j2"], default_for_string=True, default=True
    ),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


def md_code(value: Any) -> str:
    """Text as one Markdown code span, so no markup in it renders: delimited by a run of
    backticks longer than any inside, on one line (a newline would end a list item or table row)."""
    text = " ".join(str(value).replace("\0", "").splitlines())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_fence(value: Any, info: str = "") -> str:
    """Text as a fenced Markdown code block whose fence is longer than any backtick run inside,
    so the text cannot close it and go on as markup."""
    text = str(value).replace("\0", "")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def _md_cell(value: Any) -> Any:
    """A table cell's text that renders as itself: HTML characters as entities, the characters
    that end a cell or start a link escaped, one line."""
    if not isinstance(value, str):
        return value
    text = " ".join(value.replace("\0", "").splitlines())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([|\[\]`\\])", r"\\\1", text)


_TEMPLATES.filters["md_code"] = md_code
# every report says which deploytool wrote it
_TEMPLATES.globals["deploytool_version"] = __version__
_TEMPLATES.filters["md_fence"] = md_fence


def render(template: str, **context: Any) -> str:
    """Render templates/<template> (HTML ones get the shared page styles)."""
    return _TEMPLATES.get_template(template).render(**context)


def table_markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "_(no rows)_"
    frame = frame.rename(columns=lambda c: _md_cell(str(c)))
    return frame.map(_md_cell).to_markdown(index=False)


def table_html(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p><em>(no rows)</em></p>"
    return frame.to_html(index=False, border=0, classes="table", na_rep="–", escape=True)


class _Pyplot:
    """matplotlib.pyplot with the Agg backend (no display: PNGs only), imported when the first
    picture is drawn. Importing it costs about 0.5 s of CPU, and most processes that load the
    report modules draw nothing: a rollout's qualify of preflight and contract, an up's qualify
    whose suites have no picture, a rollout's plan."""

    _module: Any = None

    def __getattr__(self, name: str) -> Any:
        if _Pyplot._module is None:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot

            _Pyplot._module = matplotlib.pyplot
        return getattr(_Pyplot._module, name)


pyplot = _Pyplot()


def figure_data_uri(figure: Any) -> str:
    """A matplotlib figure as an inline PNG, so report.html needs no other file."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
