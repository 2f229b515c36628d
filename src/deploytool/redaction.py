"""Secrets out of everything deploytool says: by key name, by a key on a command line, and by
value.

Every secret value this process reads (an API key, a hub token: `profiles.SecretRef.resolve`
and the client's key) is *held* here, and every way out of the process passes through `scrub`
or `redact`: error messages and --json (cli), files written through `files.write_atomic`
(reports, results.json, release records), the journal, and what a server says about itself
(SGLang's /server_info carries `api_key` and a `launch_command` that holds it). A value
shorter than MIN_HELD characters is not held: scrubbing it would mangle ordinary text, and no
real key is that short.

Standard library only: the CLI's start-up and the state directory use it.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import tempfile
import threading
from typing import Any

REDACTED = "<redacted>"
MIN_HELD = 6

_held: set[str] = set()
_lock = threading.Lock()

# Field names whose value is a secret, wherever they appear in a JSON-like value.
KEY_FIELDS = frozenset(
    {"api_key", "admin_api_key", "api-key", "admin-api-key", "hf_token", "password", "authorization"}
)
# A key on a command line (SGLang's launch_command is the merged command line, --config included).
# The key after the flag: quoted ('...', "...", or \"...\" as a JSON string spells a quoted
# one), or unquoted, never another flag (as argparse reads it), ending at a space, a quote or a
# backslash: scrub also runs over whole JSON documents (files.write_json), where the string's
# closing quote, or the backslash of an escape, directly follows a key that ends it; swallowing
# them left a file that was not JSON.
_KEY_ON_COMMAND_LINE = re.compile(
    r"(--(?:admin[-_])?api[-_]key(?:=|\s+))(?:'[^']*'|\"[^\"]*\"|\\\"[^\"\\]*\\\"|(?!--)[^\s\"'\\]+)"
)
_BEARER = re.compile(r"((?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=-]{6,}")
# user:password@ in a URL
_URL_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s:]*:[^/@\s]*@")
# What every match of _URL_CREDENTIALS holds after its scheme. The scheme's part tries each word of
# the text and backtracks through it (25-40 ms over a 120 KB report, and a qualification writes four
# files after every suite); this one starts at a literal `://`, so a text without credentials in a
# URL, nearly every text, is passed over in well under a millisecond.
_URL_CREDENTIALS_TAIL = re.compile(r"://[^/@\s:]*:[^/@\s]*@")
# A key given as the next item of an argv list: ['--api-key', 'sk-...']
_KEY_FLAG = re.compile(r"^--(?:admin[-_])?api[-_]key$")


def hold(value: str | None) -> None:
    """Remember a secret value this process holds, so that every later output scrubs it."""
    if value is None:
        return
    value = value.strip()
    if len(value) >= MIN_HELD:
        with _lock:
            _held.add(value)


def held() -> tuple[str, ...]:
    with _lock:
        # longest first, so a value that contains another is replaced whole
        return tuple(sorted(_held, key=len, reverse=True))


def forget_all() -> None:
    """For tests: a fresh process holds nothing."""
    with _lock:
        _held.clear()


def scrub(text: str, values: list[str] | tuple[str, ...] = ()) -> str:
    """`text` with every held (and given) secret value, a key on a command line, a bearer token
    and a URL's credentials replaced by REDACTED."""
    if not text:
        return text
    for value in (*[v for v in values if v], *held()):
        # as written, and as an HTML page or a JSON string would spell it
        for form in {value, html.escape(value), json.dumps(value)[1:-1]}:
            if form in text:
                text = text.replace(form, REDACTED)
    text = _KEY_ON_COMMAND_LINE.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
    if _URL_CREDENTIALS_TAIL.search(text) is None:
        return text
    return _URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + "@", text)


def redact(obj: Any, values: list[str] | tuple[str, ...] = ()) -> Any:
    """A copy of `obj` (JSON-like) with key fields, the value after a key flag in a list, and
    every occurrence of a secret value (held or given) replaced."""
    values = tuple(v for v in values if v)
    if isinstance(obj, dict):
        return {
            k: (REDACTED if (str(k).lower() in KEY_FIELDS and v not in (None, "")) else redact(v, values))
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        out = []
        after_flag = False
        for item in obj:
            out.append(REDACTED if after_flag and isinstance(item, str) else redact(item, values))
            after_flag = isinstance(item, str) and bool(_KEY_FLAG.match(item))
        return out
    if isinstance(obj, str):
        return scrub(obj, values)
    return obj


def scrub_all(obj: Any) -> Any:
    """A copy of `obj` (JSON-like) with `scrub` applied to every string and the value after a key
    flag in a list replaced, key fields left as they are: for records that keep a secret's
    *reference* under a key field (release.json's `api_key`)."""
    if isinstance(obj, dict):
        return {k: scrub_all(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        out = []
        after_flag = False
        for item in obj:
            out.append(REDACTED if after_flag and isinstance(item, str) else scrub_all(item))
            after_flag = isinstance(item, str) and bool(_KEY_FLAG.match(item))
        return out
    return scrub(obj) if isinstance(obj, str) else obj


def scrub_file(path: os.PathLike[str] | str) -> None:
    """Rewrite a file that another process wrote into (a server's or container's output, sent
    straight to a file of a report), with `scrub` applied line by line: a server may print its
    own command line, key included. Line by line, so a large log is never held whole; a secret
    holds no newline, so none is split. Written beside it and renamed: a reader sees one or the
    other whole. A file that cannot be read or written is left as it is (and said in the error
    of whoever reads it next)."""
    path = os.fspath(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=f".{os.path.basename(path)}.")
    except OSError:
        return
    try:
        with open(path, "rb") as source, os.fdopen(fd, "wb") as out:
            for raw in source:
                line = raw.decode("utf-8", "surrogateescape")
                out.write(scrub(line).encode("utf-8", "surrogateescape"))
        os.chmod(tmp, os.stat(path).st_mode & 0o777)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
