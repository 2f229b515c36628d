"""The few git operations a fork needs, run with the host's `git` (the image has none).

A local repository (a checkout or a bare one) is read where it lies. A URL is fetched once
into deploytool's cache (a bare mirror per URL, `cache/git/`), only the commit asked for
when the server allows it; later reads, `render` included, need no network while the
commit is there. Nothing here ever checks out, resets or writes into a user's repository.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import CouldNotRun, UsageError

FETCH_HINT = (
    "check the URL and that this host can reach it (git's credential helper or an SSH key for a "
    "private repository)"
)
# scp-like SSH addresses (git@host:org/repo.git) are URLs too.
_SCP = re.compile(r"^[\w.-]+@[\w.-]+:")


def is_url(repo: str) -> bool:
    return "://" in repo or bool(_SCP.match(repo))


def git(repo: Path, *args: str, check: bool = True, text: bool = True) -> subprocess.CompletedProcess:
    """`git -C repo ARGS`; a failure is a CouldNotRun naming the command and git's words."""
    if shutil.which("git") is None:
        raise CouldNotRun(
            "git is not installed on this host: a git or path runtime source needs it",
            hint="install git (apt-get install git), or use the wheel source",
        )
    # A user's global config must not change what is read (e.g. a pager, an external diff).
    env = {**os.environ, "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=text, env=env)  # nosec B607: the user's git from PATH, as they run it themselves
    if check and proc.returncode != 0:
        err = proc.stderr if text else proc.stderr.decode(errors="replace")
        raise CouldNotRun(
            f"`git {' '.join(args[:4])}` failed in {repo}:\n"
            + "\n".join("    " + x for x in err.strip().splitlines()[-8:])
        )
    return proc


def is_repository(path: Path) -> bool:
    return path.is_dir() and git(path, "rev-parse", "--git-dir", check=False).returncode == 0


def is_bare(path: Path) -> bool:
    return git(path, "rev-parse", "--is-bare-repository").stdout.strip() == "true"


def has_commit(repo: Path, commit: str) -> bool:
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", check=False)
    return proc.returncode == 0 and proc.stdout.strip() == commit


def rev_parse(repo: Path, ref: str) -> str:
    """The commit a ref (branch, tag, hash) names now."""
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if proc.returncode != 0:
        raise UsageError(
            f"{repo} has no commit {ref!r}", hint="name a branch, a tag or a commit of that repository"
        )
    return proc.stdout.strip()


def mirror(url: str) -> Path:
    """The cache's bare mirror of a repository URL (made on first use)."""
    from ..release.state import cache_dir

    path = cache_dir("git", hashlib.sha256(url.encode()).hexdigest()[:16])
    if not (path / "HEAD").exists():
        git(path, "init", "--quiet", "--bare")
        git(path, "remote", "add", "origin", url)
    return path


def fetch_commit(url: str, commit: str) -> Path:
    """A mirror of `url` that holds `commit`: fetched by hash (one commit's history), or, where
    the server refuses a fetch by hash, every branch and tag."""
    repo = mirror(url)
    if has_commit(repo, commit):
        return repo
    by_hash = git(repo, "fetch", "--quiet", "origin", commit, check=False)
    if by_hash.returncode != 0 or not has_commit(repo, commit):
        everything = git(
            repo,
            "fetch",
            "--quiet",
            "origin",
            "+refs/heads/*:refs/heads/*",
            "+refs/tags/*:refs/tags/*",
            check=False,
        )
        if everything.returncode != 0:
            raise CouldNotRun(
                f"could not fetch {url}:\n"
                + "\n".join("    " + x for x in everything.stderr.strip().splitlines()[-6:]),
                hint=FETCH_HINT,
            )
    if not has_commit(repo, commit):
        raise UsageError(
            f"{url} has no commit {commit}",
            hint="push the commit, or check the hash (`git rev-parse HEAD` in the fork)",
        )
    return repo


def fetch_refs(url: str) -> Path:
    """A mirror of `url` with its branches and tags (for `patches import`, which names refs)."""
    repo = mirror(url)
    fetched = git(
        repo,
        "fetch",
        "--quiet",
        "origin",
        "+refs/heads/*:refs/heads/*",
        "+refs/tags/*:refs/tags/*",
        check=False,
    )
    if fetched.returncode != 0:
        raise CouldNotRun(
            f"could not fetch {url}:\n"
            + "\n".join("    " + x for x in fetched.stderr.strip().splitlines()[-6:]),
            hint=FETCH_HINT,
        )
    return repo


def uncommitted(worktree: Path, subdir: str) -> list[str]:
    """Changed, staged or untracked (not ignored) files under `subdir` of a checkout."""
    out = git(worktree, "status", "--porcelain", "--untracked-files=normal", "--", subdir or ".").stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def show(repo: Path, commit: str, path: str) -> str | None:
    """A file's text at a commit, or None when the commit has no such file."""
    proc = git(repo, "show", f"{commit}:{path}", check=False)
    return proc.stdout if proc.returncode == 0 else None


def archive(repo: Path, commit: str, subdir: str, dest: Path) -> Path:
    """The tree of `subdir` at `commit` as a tar file (paths start with `subdir/`)."""
    partial = dest.with_name(f".{dest.name}.partial")
    git(repo, "archive", "--format=tar", f"--output={partial}", commit, "--", subdir or ".")
    partial.replace(dest)
    return dest


def format_patches(repo: Path, base: str, head: str, subdir: str, package: str, out: Path) -> list[Path]:
    """One mail-style patch per commit of base..head that touches `subdir/package`, with only
    that folder's changes and paths relative to `subdir`; merge commits are skipped."""
    relative = [f"--relative={subdir}"] if subdir else []
    proc = git(
        repo,
        "format-patch",
        "--no-renames",
        "--no-binary",
        "--no-signature",
        *relative,
        "-o",
        str(out.resolve()),
        f"{base}..{head}",
        "--",
        f"{subdir}/{package}" if subdir else package,
    )
    return [Path(line) for line in proc.stdout.splitlines() if line.strip()]
