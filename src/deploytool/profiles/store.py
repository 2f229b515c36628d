"""Where profiles are found and how `extends:` resolves them.

A profile is validated once, fully resolved, before anything is built or started: an unknown
key, a wrong type, a missing field or a cycle in `extends` is refused with the file, the line,
the field and what was expected.

Merge rule for `extends`: mappings merge key by key (the child wins), everything else (lists,
scalars) is replaced whole, and a child value of `null` deletes the parent's key, so a child
can drop a launch flag it does not want.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ProfileError, UsageError
from ..resources import resource, user_config_dir
from ..yamlio import LocatedDocument, load_yaml
from . import rules
from .schema import Profile
from .templated import templated_problems


@dataclass
class _RawProfile:
    name: str
    doc: LocatedDocument


PROFILES_ENV = "DEPLOYTOOL_PROFILES_PATH"


def search_folders(extra_dirs: list[Path] | None = None) -> list[tuple[Path, str]]:
    """Each folder profiles are read from, with where it comes from, in order: the built-in
    profiles, the user's own ($XDG_CONFIG_HOME/deploytool/profiles, when it exists), then
    DEPLOYTOOL_PROFILES_PATH, then --profiles-dir. A later folder's profile of the same name
    replaces an earlier one's."""
    folders = [(resource("profiles"), "built-in")]
    user = user_config_dir("profiles")
    if user.is_dir():
        folders.append((user, "user config"))
    env = os.environ.get(PROFILES_ENV, "")
    folders += [(Path(p), PROFILES_ENV) for p in env.split(os.pathsep) if p]
    folders += [(Path(d), "--profiles-dir") for d in extra_dirs or []]
    for folder, origin in folders[1:]:
        if not folder.is_dir():
            raise UsageError(f"profiles folder {folder} (from {origin}) does not exist")
    return folders


def search_path(extra_dirs: list[Path] | None = None) -> list[Path]:
    return [folder for folder, _ in search_folders(extra_dirs)]


class ProfileStore:
    """Every profile on the search path, resolved on demand."""

    def __init__(self, extra_dirs: list[Path] | None = None):
        folders = search_folders(extra_dirs)
        self.folders = folders
        self.dirs = [folder for folder, _ in folders]
        self._raw: dict[str, _RawProfile] = {}
        self._origin: dict[str, str] = {}
        for d, origin in folders:
            for path in sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml")):
                doc = load_yaml(path)
                if not isinstance(doc.data, dict):
                    raise ProfileError(
                        f"{path}:1: a profile must be a mapping of fields, got {type(doc.data).__name__}"
                    )
                name = doc.data.get("name")
                if not isinstance(name, str):
                    raise ProfileError(f"{doc.where(('name',))}: field 'name' is missing or not text")
                self._raw[name] = _RawProfile(name=name, doc=doc)
                self._origin[name] = origin

    def origin(self, name: str) -> str:
        """Where the file of profile `name` was found: built-in, user config,
        DEPLOYTOOL_PROFILES_PATH or --profiles-dir."""
        return self._origin[name]

    def names(self, *, include_abstract: bool = False) -> list[str]:
        names = sorted(self._raw)
        if include_abstract:
            return names
        return [n for n in names if not self._raw[n].doc.data.get("abstract", False)]

    def all(self) -> list[Profile]:
        return [self.get(n) for n in self.names()]

    def get(self, name: str) -> Profile:
        if name not in self._raw:
            known = ", ".join(self.names()) or "none"
            raise ProfileError(
                f"unknown profile {name!r}",
                hint=f"known profiles: {known} (searched {', '.join(str(d) for d in self.dirs)})",
            )
        chain = self._chain(name)
        merged: dict[str, Any] = {}
        for raw in reversed(chain):  # base first, the profile itself last
            body = {k: v for k, v in raw.doc.data.items() if k != "extends"}
            merged = deep_merge(merged, body)
        merged["name"] = name
        merged["abstract"] = chain[0].doc.data.get("abstract", False)
        try:
            profile = Profile.model_validate(merged)
        except ValidationError as exc:
            raise ProfileError(_explain(exc, chain)) from None
        _check_semantics(profile, chain)  # rules across fields: model source and secrets
        profile.source = str(chain[0].doc.path)
        if profile.model.config and not Path(profile.model.config).is_absolute():
            # relative to the file that says it, wherever a profile extending it lives
            owner = next(
                (
                    r
                    for r in chain
                    if isinstance(r.doc.data.get("model"), dict)
                    and r.doc.data["model"].get("config") == profile.model.config
                ),
                chain[0],
            )
            profile.model.config = str(Path(owner.doc.path).parent / profile.model.config)
        profile.chain = [r.name for r in chain]
        return profile

    def _chain(self, name: str) -> list[_RawProfile]:
        chain: list[_RawProfile] = []
        seen: list[str] = []
        current: str | None = name
        while current is not None:
            if current in seen:
                cycle = " -> ".join([*seen, current])
                raise ProfileError(
                    f"{self._raw[seen[-1]].doc.where(('extends',))}: 'extends' makes a cycle: {cycle}"
                )
            if current not in self._raw:
                child = self._raw[seen[-1]]
                raise ProfileError(
                    f"{child.doc.where(('extends',))}: 'extends' names unknown profile {current!r}",
                    hint=f"known profiles: {', '.join(sorted(self._raw))}",
                )
            seen.append(current)
            raw = self._raw[current]
            chain.append(raw)
            parent = raw.doc.data.get("extends")
            if parent is not None and not isinstance(parent, str):
                raise ProfileError(f"{raw.doc.where(('extends',))}: 'extends' must be one profile name")
            current = parent
        return chain


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


_SECRET_NAME = re.compile(r"key|token|secret|password|credential", re.IGNORECASE)


def names_a_secret(loc: tuple[object, ...]) -> bool:
    """A field whose value may be a secret: under `secrets:`, or named like one (api_key, HF_TOKEN)."""
    return bool(loc) and (loc[0] == "secrets" or any(_SECRET_NAME.search(str(part)) for part in loc))


# A value in a profile may be megabytes long (a YAML scalar has no limit but the file's): an
# error shows the start of it and its length, never the whole value again. A message (a rule's
# own words, which may quote the value) is longer than a value shown, but bounded too.
SHOWN_CHARS = 200
MESSAGE_CHARS = 2000


def _cut(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters in all)"


def _shown(value: Any) -> str:
    return _cut(repr(value))


def _explain(exc: ValidationError, chain: list[_RawProfile]) -> str:
    """Each pydantic error as 'file:line: field: what was expected', pointing at the file in
    the extends chain that set the field (or the profile itself when none did)."""
    lines = [f"profile {_shown(chain[0].name)} is not valid:"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = ".".join(_cut(str(p)) for p in loc)
        owner = next((r for r in chain if loc in r.doc.lines), None)
        if owner is None:
            # A missing field: point at the closest parent mapping in the profile itself.
            owner = next((r for r in chain if loc[:-1] in r.doc.lines), chain[0])
        where = owner.doc.where(loc)
        what = {
            "extra_forbidden": "unknown field (check the spelling; see docs/profiles.md for the schema)",
            "missing": "required field is missing",
        }.get(err["type"], _cut(err["msg"], MESSAGE_CHARS))  # a validator's message may quote the value
        got = "" if err["type"] in ("missing",) else f" (got {_shown(err.get('input'))})"
        if err["type"] == "extra_forbidden":
            got = ""
        elif got and names_a_secret(loc):
            # a key pasted where its reference belongs: the error must not print it back
            got = " (the value is not shown: this field holds a secret's reference, never the secret)"
        lines.append(f"  {where}: {field}: {what}{got}")
    return "\n".join(lines)


def _check_semantics(profile: Profile, chain: list[_RawProfile]) -> None:
    """Rules across fields (what templates write, model source, secrets), reported like schema errors:
    file:line."""
    # the one rule for what reaches a Dockerfile, a compose file or a command line comes first:
    # the other rules read those fields
    problems = templated_problems(profile) or (
        rules.model_source_problems(profile) + rules.secret_problems(profile)
    )
    if not problems:
        return
    lines = [f"profile {_shown(chain[0].name)} is not valid:"]
    for loc, what in problems:
        owner = next((r for r in chain if loc in r.doc.lines), None) or next(
            (r for r in chain if loc[:-1] in r.doc.lines), chain[0]
        )
        lines.append(
            f"  {owner.doc.where(loc)}: {'.'.join(_cut(str(p)) for p in loc)}: {_cut(what, MESSAGE_CHARS)}"
        )
    raise ProfileError("\n".join(lines))


def load_profile(name: str, extra_dirs: list[Path] | None = None) -> Profile:
    return ProfileStore(extra_dirs).get(name)
