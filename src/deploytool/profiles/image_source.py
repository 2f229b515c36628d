"""The profile fields that say where the runtime comes from: `image.source` and `image.wheels`.

    image:
      source: {kind: wheel}                            the pinned release + its patch series (default)
      source: {kind: wheel, series: my-series/}        the pinned release + another series folder
      source: {kind: git, repo: URL-or-PATH, commit: HEX}      a fork, exported at that commit (40 hex, 64 for SHA-256)
      source: {kind: path, path: PATH}                 a local source tree, as it is on disk
      wheels:                                          wheel files that replace the index's package
        - {file: PATH.whl, sha256: 64-HEX}             of the same name

Pure data, checked when the profile loads (pydantic): what the fields can say on their own.
What needs the disk or git (the commit exists, the tree is clean, the fork's version, the
wheel's hash) is checked by deploytool.image.runtime_source and .local_wheels before
anything is built. Kept free of deploytool imports: the profile schema imports it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256 object names
_SHA256 = re.compile(r"[0-9a-f]{64}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RuntimeSource(_Strict):
    """Where the image's sglang comes from. One model with a `kind` (not a union of three) so
    that a field of another kind is refused with a sentence, not a union's error list."""

    kind: Literal["wheel", "git", "path"] = Field(
        default="wheel",
        description="wheel: the pinned release and its patch series; git: a fork at a commit; "
        "path: a local source tree",
    )
    series: str | None = Field(
        default=None,
        description="wheel: a patch series folder (a `series` file and its patches) instead of the "
        "shipped images/sglang/patches/<runtime_version>/, e.g. one `deploytool patches "
        "import` wrote",
    )
    repo: str | None = Field(
        default=None,
        description="git: a repository URL or a local repository (a checkout "
        "or a bare one); no credentials in it",
    )
    commit: str | None = Field(
        default=None, description="git: the full commit (40 hex digits, 64 for SHA-256)"
    )
    path: str | None = Field(default=None, description="path: a local source tree, hashed by content")
    subdir: str | None = Field(
        default=None,
        description="git and path: the folder of the tree that holds sglang's pyproject.toml "
        "(upstream keeps it in python/); found by itself when not given",
    )

    @field_validator("commit")
    @classmethod
    def _full_commit(cls, value: str | None) -> str | None:
        if value is not None and not _COMMIT.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a full commit hash: a branch, a tag or a short hash can move, so "
                "the image would not say what it holds; give all 40 hex digits (64 in a SHA-256 repository; `git rev-parse REF`)"
            )
        return value

    @field_validator("repo")
    @classmethod
    def _no_credentials(cls, value: str | None) -> str | None:
        problem = credentials_in_url(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("subdir")
    @classmethod
    def _relative_subdir(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("/") or ".." in value.split("/")):
            raise ValueError(f"{value!r}: a folder inside the tree is expected (relative, no '..')")
        return value.strip("/") if value is not None else None

    @model_validator(mode="after")
    def _fields_of_kind(self) -> RuntimeSource:
        needs = {"wheel": (), "git": ("repo", "commit"), "path": ("path",)}[self.kind]
        takes = {"wheel": ("series",), "git": ("repo", "commit", "subdir"), "path": ("path", "subdir")}[
            self.kind
        ]
        missing = [name for name in needs if not getattr(self, name)]
        foreign = [
            name
            for name in ("series", "repo", "commit", "path", "subdir")
            if getattr(self, name) is not None and name not in takes
        ]
        if missing:
            raise ValueError(f"kind {self.kind!r} needs {' and '.join(missing)}")
        if foreign:
            raise ValueError(
                f"kind {self.kind!r} takes no {', '.join(foreign)} (a {self.kind} source has "
                f"{', '.join(takes) or 'no other field'}; set a field to null to drop one a parent set)"
            )
        return self


class LocalWheel(_Strict):
    """A wheel file the image installs instead of the index's package of the same name."""

    file: str = Field(description="the wheel file (NAME-VERSION-...-PLATFORM.whl)")
    sha256: str = Field(description="its SHA-256, 64 lower-case hex digits (`sha256sum FILE`)")

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not _SHA256.fullmatch(value):
            raise ValueError("64 lower-case hex digits expected (`sha256sum FILE`)")
        return value

    @field_validator("file")
    @classmethod
    def _a_wheel(cls, value: str) -> str:
        if not value.endswith(".whl"):
            raise ValueError(f"{value!r} is not a wheel file (NAME-VERSION-...-PLATFORM.whl)")
        return value


def credentials_in_url(repo: str | None) -> str | None:
    """Why an http(s) repository URL must not be used as given (it carries a user or token),
    or None. Wherever the URL goes (a profile, a label, a mirror's git config, a series header,
    a log) the credentials would go too."""
    if repo and "://" in repo:
        parts = urlsplit(repo)
        if parts.scheme in ("http", "https") and "@" in parts.netloc:
            return (
                "the repository URL carries credentials (user or token before '@'): a profile, a label, a "
                "file and a log would keep them; use git's credential helper or an SSH URL"
            )
    return None


def local_path(profile_file: str, raw: str) -> Path:
    """A path a profile names: `~` expanded, a relative one taken from the folder of the
    profile's own file (where a user keeps a wheel or a checkout beside it)."""
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = (Path(profile_file).parent if profile_file else Path.cwd()) / path
    return path.resolve()
