"""Where a profile's sglang comes from, resolved and checked before anything is built.

    wheel  the pinned release from the package index (or a wheelhouse) + a patch series;
    git    a fork: a repository (URL or local) at a full commit, exported on the host with
           `git archive`; its identity is the commit, so a new commit is a new image tag;
    path   a local source tree as it is on disk, identified by the sha256 of its files, so an
           edit rebuilds and an unchanged tree does not.

For git and path the package's version is read from the tree's own metadata (pyproject.toml,
or the module its `version` attribute names) and must be a release of the version matrix,
the one `image.runtime_version` pins: torch, sglang-kernel and flashinfer follow that row.
A local checkout at the named commit with uncommitted changes is refused: the commit would be
built without them. A checkout elsewhere is fine: the commit is exported as committed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tarfile
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import BuildError, FieldError, ProfileError, UsageError
from ..profiles import Profile
from ..profiles.image_source import local_path
from . import gitrepo
from .versions import load_matrix

# Folders a tree outside git keeps beside its sources that never belong in a build.
_SKIP_DIRS = {
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".venv",
    "venv",
    ".tox",
    ".eggs",
    "build",
    "dist",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
}


@dataclass(frozen=True)
class ResolvedSource:
    kind: str  # wheel | git | path
    version: str  # the package version its own metadata says (wheel: image.runtime_version)
    subdir: str = ""  # the folder of the tree holding pyproject.toml ("" = the top)
    repo: str | None = None  # git: as the profile names it (a URL, or the local repository's path)
    commit: str | None = None
    tree: Path | None = None  # git: the repository read (local, or the cache's mirror); path: the tree
    digest: str | None = None  # path: sha256 over the files under subdir; wheel: over the series folder's
    files: tuple[str, ...] = field(default=(), repr=False)  # path: those files, relative to tree
    series: Path | None = None  # wheel: a series folder other than the shipped one
    note: str | None = field(
        default=None, compare=False
    )  # something said about where it was read, not identity

    @property
    def is_fork(self) -> bool:
        return self.kind != "wheel"

    @property
    def key(self) -> str:
        """A file name for what this source holds (git: the commit; path: the content)."""
        slug = re.sub(r"[^A-Za-z0-9]+", "-", self.subdir).strip("-") or "top"
        return f"git-{self.commit}-{slug}" if self.kind == "git" else f"path-{self.digest}-{slug}"

    @property
    def identity(self) -> str:
        """What the image tag and the toolchain label record: content, never a location."""
        where = f"{self.subdir}/" if self.subdir else "./"
        if self.kind == "git":
            return f"git {self.commit} {where} (sglang {self.version})"
        if self.kind == "path":
            return f"path sha256:{self.digest} {where} (sglang {self.version})"
        # a series of one's own changes the sources (a patch may add a flag): its content is
        # part of what the image holds, its folder is not
        return f"wheel series sha256:{self.digest}" if self.series else "wheel"

    def record(self) -> dict[str, str]:
        """The image label: what the image holds, never where on this host it was read (the
        tag leaves the location out, so the label must too: the same image found from another
        checkout would carry the first one's path). A repository URL is a name, not a place on
        the host, and has no credentials (the profile refuses them): it is kept."""
        out = {"kind": self.kind, "version": self.version}
        if self.kind == "git":
            out.update(commit=self.commit or "", subdir=self.subdir)
            if self.repo and gitrepo.is_url(self.repo):
                out["repo"] = self.repo
        elif self.kind == "path":
            out.update(sha256=self.digest or "", subdir=self.subdir, files=str(len(self.files)))
        elif self.series:
            out["series_sha256"] = self.digest or ""
        return out

    def location(self) -> dict[str, str]:
        """Where this host read it (a checkout, a tree, a series folder): for the journal."""
        if self.kind == "git":
            return {"repo": self.repo or ""}
        if self.kind == "path":
            return {"path": str(self.tree)}
        return {"series": str(self.series)} if self.series else {}

    def describe(self) -> str:
        where = f" ({self.subdir}/)" if self.subdir else ""
        if self.kind == "git":
            return f"sglang {self.version} from git {self.repo} at commit {self.commit}{where}"
        if self.kind == "path":
            return f"sglang {self.version} from the tree {self.tree}{where}, sha256 {self.digest} over {len(self.files)} files"
        return f"sglang {self.version} wheel" + (f" + the series in {self.series}" if self.series else "")


def resolve(profile: Profile) -> ResolvedSource:
    """The profile's runtime source, checked: the repository and commit exist, a checkout is
    clean, the tree is sglang at a release the matrix pins. Raises ProfileError naming the field."""
    spec = profile.image.source
    where = f"profile {profile.name!r} ({profile.source or 'no file'}): image.source"
    if spec.kind == "wheel":
        series = None
        if spec.series:
            series = local_path(profile.source, spec.series)
            if not (series / "series").is_file():
                raise ProfileError(
                    f"{where}.series: {series} has no `series` file",
                    hint="a series folder holds the patches and a `series` file naming them in order "
                    "(`deploytool patches import` writes one)",
                )
        return ResolvedSource(
            "wheel",
            version=profile.image.runtime_version or "",
            series=series,
            digest=series_digest(series) if series else None,
        )
    source = _resolve_git(profile, where) if spec.kind == "git" else _resolve_path(profile, where)
    check_version(profile, source.version, where)
    return source


def series_digest(folder: Path) -> str:
    """sha256 over a series folder's `series` file and each patch it names (in its order)."""
    from .in_image.unidiff import read_series

    h = hashlib.sha256((folder / "series").read_bytes())
    for name in read_series(folder / "series"):
        path = folder / name
        h.update(b"\0" + name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"(missing)"))
    return h.hexdigest()


def _resolve_git(profile: Profile, where: str) -> ResolvedSource:
    spec = profile.image.source
    commit, url = spec.commit or "", gitrepo.is_url(spec.repo or "")
    if url:
        repo, recorded = gitrepo.fetch_commit(spec.repo or "", commit), spec.repo or ""
    else:
        repo = local_path(profile.source, spec.repo or "")
        recorded = str(repo)
        if not gitrepo.is_repository(repo):
            raise ProfileError(
                f"{where}.repo: {repo} is not a git repository",
                hint="name a clone of the fork (or its URL); for a tree without git use kind: path",
            )
        if not gitrepo.has_commit(repo, commit):
            raise ProfileError(
                f"{where}.commit: {repo} has no commit {commit}",
                hint="fetch it into that repository, or check the hash (`git log`)",
            )
    subdir, version = package_at(
        lambda rel: gitrepo.show(repo, commit, rel), spec.subdir, f"{where} ({recorded} at {commit[:12]})"
    )
    note = None
    if not url and not gitrepo.is_bare(repo):
        head = gitrepo.git(
            repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False
        ).stdout.strip()
        # The worktree's changes are against HEAD: they say something of the named commit only
        # when HEAD is that commit. Checked out elsewhere, the commit is exported as committed
        # (git archive) and the worktree plays no part.
        changes = gitrepo.uncommitted(repo, subdir) if head == commit else []
        if head != commit:
            note = (
                f"the checkout {repo} is at {head[:12] or 'no commit'}, not {commit[:12]}: that does not matter, "
                "the named commit is exported as committed (git archive)"
            )
        if changes:
            shown = ", ".join(changes[:5]) + (f" and {len(changes) - 5} more" if len(changes) > 5 else "")
            raise ProfileError(
                f"{where}: the checkout {repo} has uncommitted changes in {subdir or 'its tree'} ({shown}); "
                f"deploytool builds commit {commit[:12]} as committed, so they would silently be left out",
                hint="commit them and name the new commit (`git rev-parse HEAD`), or stash them; to build the "
                "tree as it is on disk, use `source: {kind: path, path: ...}`",
            )
    return ResolvedSource(
        "git", version=version, subdir=subdir, repo=recorded, commit=commit, tree=repo, note=note
    )


def _resolve_path(profile: Profile, where: str) -> ResolvedSource:
    spec = profile.image.source
    root = local_path(profile.source, spec.path or "")
    if not root.is_dir():
        raise ProfileError(f"{where}.path: {root} is not a folder", hint="name the source tree of the fork")

    def read(rel: str) -> str | None:
        return (root / rel).read_text() if (root / rel).is_file() else None

    subdir, version = package_at(read, spec.subdir, f"{where} ({root})")
    files = tree_files(root, subdir)
    return ResolvedSource(
        "path", version=version, subdir=subdir, tree=root, digest=tree_digest(root, files), files=tuple(files)
    )


def package_at(
    read: Callable[[str], str | None], subdir: str | None, where: str, *, field: str | None = None
) -> tuple[str, str]:
    """(folder, version) of the sglang package in a tree: the folder's pyproject.toml must name
    the project `sglang`; its version is [project].version, or the attribute
    [tool.setuptools.dynamic].version names (upstream's sglang/version.py). A refusal begins
    with `where` (a profile's field), or, given `field`, is a FieldError of that request field
    with `where` as its value."""

    def refusal(problem: str, hint: str | None = None) -> UsageError:
        if field is not None:
            return FieldError(field, problem, value=where, hint=hint)
        return ProfileError(f"{where}: {problem}", hint=hint)

    candidates = [subdir] if subdir is not None else ["python", ""]
    for folder in candidates:
        prefix = f"{folder}/" if folder else ""
        text = read(f"{prefix}pyproject.toml")
        if text is None:
            continue
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise refusal(f"{prefix}pyproject.toml is not valid TOML ({exc})") from None
        project = data.get("project") or {}
        name = re.sub(r"[-_.]+", "-", str(project.get("name", ""))).lower()
        if name != "sglang":
            if subdir is not None:
                raise refusal(
                    f"{prefix}pyproject.toml is project {project.get('name')!r}, not sglang",
                    hint="image.source.subdir names the folder of sglang's own pyproject.toml",
                )
            continue
        version = project.get("version") or _dynamic_version(read, prefix, data)
        if not version:
            raise refusal(
                f"cannot read the version of sglang from {prefix}pyproject.toml",
                hint="give [project].version, or a [tool.setuptools.dynamic] version attr "
                '(e.g. sglang.version.__version__) whose module sets __version__ = "X.Y.Z"',
            )
        return folder, str(version)
    looked = " or ".join(f"{c}/pyproject.toml" if c else "pyproject.toml" for c in candidates)
    raise refusal(
        f"no sglang package: {looked} is missing or names another project",
        hint="set image.source.subdir to the folder holding sglang's pyproject.toml",
    )


def _dynamic_version(read: Callable[[str], str | None], prefix: str, data: dict) -> str | None:
    if "version" not in ((data.get("project") or {}).get("dynamic") or []):
        return None
    attr = (((data.get("tool") or {}).get("setuptools") or {}).get("dynamic") or {}).get("version") or {}
    module, _, variable = str(attr.get("attr", "sglang.version.__version__")).rpartition(".")
    base = module.replace(".", "/")
    for rel in (f"{base}.py", f"{base}/__init__.py", f"src/{base}.py", f"src/{base}/__init__.py"):
        text = read(prefix + rel)
        if text is not None:
            match = re.search(rf"^{re.escape(variable)}\s*(?::\s*str\s*)?=\s*[\"']([^\"']+)[\"']", text, re.M)
            if match:
                return match.group(1)
    return None


def check_version(profile: Profile, version: str, where: str) -> str:
    """The release a tree's version belongs to ('0.5.23.post1+fork' -> '0.5.23'), which must
    be a row of the matrix and the profile's image.runtime_version."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    release = match.group(0) if match else version
    matrix = load_matrix()
    if matrix.sglang_row(release) is None:
        raise ProfileError(
            f"{where}: the tree is sglang {version} (its own metadata); sglang {release} is not in "
            "the version matrix",
            hint=f"pinned releases: {', '.join(sorted(matrix.sglang))}; rebase the fork onto one, or "
            f"add a tested row to {matrix.source}",
        )
    if profile.image.runtime_version != release:
        raise ProfileError(
            f"{where}: the tree is sglang {version} (its own metadata), the profile pins "
            f"image.runtime_version {profile.image.runtime_version!r}",
            hint=f'set image.runtime_version: "{release}" (torch, sglang-kernel and flashinfer '
            "follow that row of the matrix)",
        )
    return release


# -- a local tree: its files and their digest --------------------------------------------------
_DIGESTS: dict[tuple[str, tuple], str] = {}  # (root, stat signature) -> digest, for one process


def tree_files(root: Path, subdir: str) -> list[str]:
    """The files of `subdir` a build takes, relative to root: in a git checkout those git
    tracks or would track (.gitignore respected), else every file but caches and VCS folders."""
    if gitrepo.is_repository(root):
        out = gitrepo.git(
            root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", subdir or "."
        ).stdout
        names = sorted({n for n in out.split("\0") if n})
        return [
            n for n in names if (root / n).is_file() and not n.endswith(".pyc") and "__pycache__/" not in n
        ]
    found = []
    for folder, dirs, files in os.walk(root / subdir if subdir else root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        for name in files:
            path = Path(folder) / name
            if not name.endswith((".pyc", ".pyo")) and path.is_file():
                found.append(str(path.relative_to(root)))
    return sorted(found)


def tree_digest(root: Path, files: list[str]) -> str:
    """sha256 over each file's path, executable bit and bytes. Remembered per process by the
    files' sizes and modification times, so a second look at an unchanged tree reads no bytes."""
    signature = []
    for rel in files:
        stat = (root / rel).stat()
        signature.append((rel, stat.st_size, stat.st_mtime_ns, stat.st_mode & 0o111))
    key = (str(root), tuple(signature))
    if key in _DIGESTS:
        return _DIGESTS[key]
    digest = hashlib.sha256()
    for rel, _, _, mode in signature:
        digest.update(rel.encode() + b"\0" + (b"x" if mode else b"-") + b"\0")
        with (root / rel).open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    _DIGESTS.clear()  # one tree at a time is all a command looks at
    _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


# -- the tree as a tar file (the build context) and unpacked (the parser, patches check) --------
def _cache_slot(source: ResolvedSource) -> Path:
    """Where a source's exports live in the cache: a folder per commit (what it holds never
    changes), or per local tree, where the latest content replaces the one before, so that
    editing a tree and checking it again and again does not fill the disk."""
    from ..release.state import cache_dir

    if source.kind == "git":
        return cache_dir("runtime-src", f"git-{source.commit}")
    where = hashlib.sha256(f"{source.tree}\0{source.subdir}".encode()).hexdigest()[:16]
    return cache_dir("runtime-src", f"path-{where}")


def export_tar(source: ResolvedSource) -> Path:
    """The source's tree under its subdir as a tar file in the cache (paths start with the
    subdir), named by the source's key. A git commit is exported once; a local tree is written
    again, and must still have the digest the image tag was computed from."""
    dest = _cache_slot(source) / f"{source.key}.tar"
    if source.kind == "git":
        return (
            dest
            if dest.is_file()
            else gitrepo.archive(source.tree or Path(), source.commit or "", source.subdir, dest)
        )
    assert source.tree is not None
    files = tree_files(source.tree, source.subdir)
    if tree_digest(source.tree, files) != source.digest:
        raise BuildError(
            f"the tree {source.tree} changed while the image was being planned",
            hint="run the build again (it hashes the tree anew)",
        )
    partial = dest.with_name(f".{dest.name}.partial")
    with tarfile.open(partial, "w") as archive:
        for rel in files:
            archive.add(source.tree / rel, arcname=rel, recursive=False)
    partial.replace(dest)
    for older in dest.parent.glob("*.tar"):
        if older != dest:
            older.unlink(missing_ok=True)
    return dest


def unpacked(source: ResolvedSource) -> Path:
    """The source's package folder unpacked into the cache (read-only by convention), once per
    commit or tree content: what `profiles check` puts first on the parser's path and what
    `patches check` applies a series to."""
    root = _cache_slot(source) / "tree"
    marker = root / ".complete"
    if not marker.exists() or marker.read_text().strip() != source.identity:
        partial = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root.parent))
        with tarfile.open(export_tar(source)) as archive:
            archive.extractall(partial, filter="data")
        (partial / ".complete").write_text(source.identity + "\n")
        shutil.rmtree(root, ignore_errors=True)
        partial.rename(root)
    return root / source.subdir if source.subdir else root


def runtime_notes(
    profile: Profile, *, source: ResolvedSource | None = None, own: list[Any] | None = None
) -> list[str]:
    """What `render` and `up --dry-run` say of the runtime when it is not the pinned wheel
    with its shipped series (nothing otherwise: a release profile's files are unchanged).
    `source`, `own`: the runtime source and the local wheels resolved already (a recipe's
    declaration), not resolved again."""
    from . import local_wheels

    if profile.image.recipe != "sglang":
        return []
    notes = []
    spec = profile.image.source
    if spec.kind != "wheel" or spec.series:
        source = source or resolve(profile)
        notes.append(f"runtime: {source.describe()}")
        if source.is_fork:
            notes.append(f"runtime identity (in the image tag and the toolchain label): {source.identity}")
        if source.note:
            notes.append(f"runtime: {source.note}")
    for wheel in own if own is not None else local_wheels.resolve(profile):
        notes.append(
            f"local wheel: {wheel.name} {wheel.version} ({wheel.path}, sha256 {wheel.sha256}) "
            "in place of the index's"
        )
    return notes
