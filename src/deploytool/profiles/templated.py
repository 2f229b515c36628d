"""One rule for every profile field that reaches a Dockerfile, a compose file or a command line.

A profile's values are written into text other programs parse: `FROM {{ base }}`,
`RUN python{{ python }} -m venv`, `pip install sglang=={{ runtime_version }}`, a requirements
file, compose's YAML, the server's argv. A line break there writes a line of the profile's
choosing (a Dockerfile step, a requirement), a space or a `;` another shell word. So, checked
once when a profile loads, before anything renders:

  * every text of the profile (a value or a mapping key, at any depth) but the free-form gates
    of `qualify:` and `bench:` holds no control character: no line break, tab, NUL or escape
    (C0, DEL, C1) and no Unicode line or paragraph separator;
  * a field that a template writes bare, without quoting, has its own shape (SHAPES: a version
    is a version, a base image a reference, an environment name an identifier).

Each problem is (field location, what was expected), reported by the store as file:line.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Any

from .schema import Profile

Problem = tuple[tuple[Any, ...], str]

# The sections whose values are gates read by deploytool itself, never written into a template.
FREE_FORM = ("qualify", "bench")

_VERSION = (
    r"[0-9][0-9A-Za-z.+!_-]*",
    "a version such as 2.14.1 or 2.14.1+cu130 (digits, letters, . + ! _ -)",
)
_NAME = (
    r"[A-Za-z_][A-Za-z0-9_]*",
    "an environment variable name (letters, digits, _; not starting with a digit)",
)
# A field's location, "*" for any key or index there, and its shape: (regex, what is expected).
SHAPES: dict[tuple[str, ...], tuple[str, str]] = {
    ("image", "recipe"): (r"[a-z0-9][a-z0-9_-]*", "a recipe name such as sglang or sim (images/<recipe>/)"),
    ("image", "base"): (
        r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*",
        "an image reference NAME[:TAG][@sha256:DIGEST] (no space or other character)",
    ),
    ("image", "python"): (r"[0-9]+\.[0-9]+", "a Python version MAJOR.MINOR such as 3.11"),
    ("image", "cuda"): (r"[0-9]+\.[0-9]+(\.[0-9]+)?", "a CUDA version such as 13.0"),
    ("image", "torch_version"): _VERSION,
    ("image", "runtime_version"): _VERSION,
    ("image", "kernel_version"): _VERSION,
    ("image", "flashinfer_version"): _VERSION,
    ("image", "patches", "*"): (
        r"[A-Za-z0-9][A-Za-z0-9._+-]*",
        "a patch name of the series (letters, digits, . _ + -)",
    ),
    ("image", "source", "subdir"): (
        r"[A-Za-z0-9._+-][A-Za-z0-9._/+-]*",
        "a folder of the tree such as python (letters, digits, . _ + - /)",
    ),
    # the file's name is written into the image's requirements file, one requirement a line
    ("image", "wheels", "*", "file"): (
        r"(.*/)?[^\s/]+\.whl",
        "a wheel file whose name has no space (NAME-VERSION-...-PLATFORM.whl)",
    ),
    ("image", "build_args", "*", "key"): (
        r"[A-Za-z_][A-Za-z0-9_]*",
        "a build arg name: an identifier (letters, digits, _)",
    ),
    ("model", "revision"): (
        r"[A-Za-z0-9][A-Za-z0-9._/-]*",
        "a branch, tag or commit (letters, digits, . _ / -)",
    ),
    ("server", "args", "*", "key"): (
        r"-{0,2}[A-Za-z0-9][A-Za-z0-9_.-]*",
        "a flag name without its dashes (letters, digits, - _ .)",
    ),
    ("server", "env", "*", "key"): _NAME,
    ("server", "shm_size"): (r"[0-9]+(\.[0-9]+)?([bkmgBKMG]|[kmgKMG][bB])?", "a size such as 32g or 1024m"),
    ("server", "ulimits", "*", "key"): (r"[a-z]+", "a limit name such as memlock, stack or nofile"),
    ("server", "api_key", "env"): _NAME,
    ("secrets", "hf_token", "env"): _NAME,
    ("health", "path"): (r"/[!-~]*", "a path such as /health (printable, no space)"),
}


def _control(text: str) -> str | None:
    """The first character of `text` that would end or reshape a line, described, or None."""
    for i, c in enumerate(text):
        if unicodedata.category(c) == "Cc" or c in "\u2028\u2029":
            name = {
                "\n": "a line break (\\n)",
                "\r": "a carriage return (\\r)",
                "\t": "a tab (\\t)",
                "\0": "a NUL",
            }.get(c, f"the control character U+{ord(c):04X}")
            return f"{name} at character {i + 1}"
    return None


def _texts(value: Any, loc: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str, bool]]:
    """(location, text, is a key) of every text in `value`, keys included."""
    if isinstance(value, str):
        yield loc, value, False
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield (*loc, key), key, True
            yield from _texts(item, (*loc, key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _texts(item, (*loc, i))


def _shape(loc: tuple[Any, ...], is_key: bool) -> tuple[str, str] | None:
    for pattern, shape in SHAPES.items():
        wanted = pattern[:-1] if pattern[-1] == "key" else pattern
        if (pattern[-1] == "key") != is_key or len(wanted) != len(loc):
            continue
        if all(w == "*" or w == str(part) for w, part in zip(wanted, loc, strict=True)):
            return shape
    return None


def templated_problems(profile: Profile) -> list[Problem]:
    """Every text of `profile` held to the one rule: no control character anywhere a template may
    write it, and the shape of its field where SHAPES names one."""
    data = profile.model_dump(mode="python", exclude={"source", "chain"})
    problems: list[Problem] = []
    for loc, text, is_key in _texts(data, ()):
        if loc and loc[0] in FREE_FORM:
            continue
        what = "name" if is_key else "value"
        bad = _control(text)
        if bad:
            problems.append(
                (
                    loc,
                    f"the {what} holds {bad}: expected one line of printable text (it is written "
                    "into the image's Dockerfile, the compose file or the server's command line)",
                )
            )
            continue
        shape = _shape(loc, is_key)
        if shape and not re.fullmatch(shape[0], text):
            shown = text if len(text) <= 60 else text[:57] + "..."
            problems.append((loc, f"expected {shape[1]}, got {shown!r}"))
    return problems
