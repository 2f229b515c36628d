"""Helpers for the runtime-source tests: git repositories laid out as sglang's (the package and
its pyproject.toml under python/), profiles that name them, and wheel files rebuilt under a
version of their own."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import zipfile
from pathlib import Path

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "sglang"
version = "{version}"
description = "sglang's package sources as a fork's repository keeps them (a test fixture)"
requires-python = ">=3.10"

[tool.setuptools.packages.find]
include = ["sglang*"]

[tool.setuptools.package-data]
"*" = ["**/*"]
"""


# Fixed dates: the same trees give the same commits in every run, so an image a test built
# before has the same tag and is found, not built again.
_DATES = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=fork",
            "-c",
            "user.email=fork@example.invalid",
            "-c",
            "core.compression=1",
            "-c",
            "init.defaultBranch=main",
            *args,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **_DATES},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def tiny_repo(root: Path, version: str = "0.5.23") -> tuple[Path, str]:
    """A repository whose python/ holds an sglang package of two files: enough for what is
    read without importing it (layout, metadata, identity)."""
    repo = root / "tiny-sglang"
    (repo / "python" / "sglang").mkdir(parents=True)
    (repo / "python" / "pyproject.toml").write_text(PYPROJECT.format(version=version))
    (repo / "python" / "sglang" / "__init__.py").write_text("")
    (repo / "python" / "sglang" / "version.py").write_text(f'__version__ = "{version}"\n')
    (repo / "README.md").write_text("a fork\n")
    git(repo, "init", "-q")
    return repo, commit_all(repo, f"sglang {version}")


def profile_yaml(
    name: str,
    source: dict,
    *,
    extends: str = "sglang-cpu-test",
    args: dict | None = None,
    wheels: list[dict] | None = None,
    patches: list[str] | None = None,
) -> str:
    """A profile extending the CPU test profile, with its image.source (and image.wheels)."""
    import yaml

    image: dict = {"source": source}
    if wheels is not None:
        image["wheels"] = wheels
    if patches is not None:
        image["patches"] = patches
    doc = {"name": name, "extends": extends, "image": image}
    if args:
        doc["server"] = {"args": args}
    return yaml.safe_dump(doc, sort_keys=False)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rebuild_wheel(original: Path, dest_dir: Path, new_version: str) -> Path:
    """The same wheel under another version (a local build of a package the index also has):
    dist-info renamed, METADATA's version and RECORD's hashes rewritten."""
    match = re.match(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-(?P<tags>.+)\.whl$", original.name)
    assert match, original.name
    name, old = match["name"], match["version"]
    target = dest_dir / f"{name}-{new_version}-{match['tags']}.whl"
    old_info, new_info = f"{name}-{old}.dist-info", f"{name}-{new_version}.dist-info"
    records = []
    with zipfile.ZipFile(original) as src, zipfile.ZipFile(target, "w") as out:
        for item in src.infolist():
            data = src.read(item.filename)
            path = item.filename.replace(old_info + "/", new_info + "/", 1)
            if path == f"{new_info}/RECORD":
                continue
            if path == f"{new_info}/METADATA":
                data = re.sub(rb"(?m)^Version: .*$", f"Version: {new_version}".encode(), data, count=1)
            out.writestr(_entry(path), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{path},sha256={digest},{len(data)}")
        records.append(f"{new_info}/RECORD,,")
        out.writestr(_entry(f"{new_info}/RECORD"), "\n".join(records) + "\n")
    return target


def _entry(path: str) -> zipfile.ZipInfo:
    """A zip entry with a fixed time and mode: the same wheel bytes (and sha256) every run."""
    info = zipfile.ZipInfo(path, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info
