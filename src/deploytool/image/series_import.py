"""`deploytool patches import`: the patch series a fork's commits make over an upstream release.

    deploytool patches import --from REPO --base v0.5.23 --head COMMIT --out DIR

writes one patch per commit of base..head (git format-patch, paths relative to the folder of
sglang's pyproject.toml, so they apply in site-packages as the shipped series do) and a
`series` file naming them in order, headed by where they came from. A profile builds the
pinned release with it through `image.source: {kind: wheel, series: DIR}`, and
`deploytool patches check` applies it. Merge commits are left out (format-patch has no
single diff for them) and named; a binary change is refused, since the applier reads text.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FieldError, FieldSentenceError, UsageError
from . import gitrepo
from .in_image import unidiff

PACKAGE = "sglang"  # the package folder beside pyproject.toml, what the image's site-packages holds


@dataclass
class ImportedSeries:
    folder: str
    repo: str
    base: str  # as given
    base_commit: str
    head_commit: str
    subdir: str
    sglang_version: str  # the base's own metadata
    names: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # "<commit> <subject>: why"


def import_series(repo: str, base: str, head: str, out: Path, *, subdir: str | None = None) -> ImportedSeries:
    from ..profiles.image_source import credentials_in_url
    from .runtime_source import package_at

    problem = credentials_in_url(repo)
    if problem:  # before the fetch: the mirror's config, the series header and memory.yaml name the URL
        raise FieldError("repo", problem)
    if gitrepo.is_url(repo):
        git_dir = gitrepo.fetch_refs(repo)
    else:
        git_dir = Path(repo).expanduser().resolve()
        if not gitrepo.is_repository(git_dir):
            raise FieldError(
                "repo", "not a git repository", value=repo, hint="a clone of the fork, or its URL"
            )
    base_commit, head_commit = gitrepo.rev_parse(git_dir, base), gitrepo.rev_parse(git_dir, head)
    if (
        gitrepo.git(git_dir, "merge-base", "--is-ancestor", base_commit, head_commit, check=False).returncode
        != 0
    ):
        # the head is named as its flag too: the message is one sentence about both fields
        raise FieldSentenceError(
            "base",
            f"is not an ancestor of --head {head} ({head_commit[:12]})",
            value=f"{base} ({base_commit[:12]})",
            hint="the series is the commits from the upstream release to the fork's head: rebase the "
            "fork onto the release, or name the release it branched from",
        )
    folder, version = package_at(
        lambda rel: gitrepo.show(git_dir, base_commit, rel), subdir, f"{base} of {repo}", field="base"
    )
    if out.exists() and any(out.iterdir()):
        raise FieldSentenceError(
            "out", "is not empty", value=str(out), hint="name a new folder (a series folder holds one series)"
        )
    result = ImportedSeries(
        folder=str(out),
        repo=repo,
        base=base,
        base_commit=base_commit,
        head_commit=head_commit,
        subdir=folder,
        sglang_version=version,
    )
    merges = gitrepo.git(
        git_dir, "log", "--merges", "--reverse", "--format=%h %s", f"{base_commit}..{head_commit}"
    ).stdout
    result.left_out = [
        f"{line}: a merge commit (no single diff)" for line in merges.splitlines() if line.strip()
    ]
    # site-packages holds the package alone: the fork's other changes (its pyproject.toml,
    # tests, C++ sources) have no place in a series, and are named.
    prefix = f"{folder}/" if folder else ""
    changed = gitrepo.git(
        git_dir, "diff", "--name-only", "--no-renames", base_commit, head_commit, "--", folder or "."
    ).stdout.split()
    outside = [n[len(prefix) :] for n in changed if not n.startswith(f"{prefix}{PACKAGE}/")]
    if outside:
        result.left_out.append(
            f"changes outside {prefix}{PACKAGE}/ (not in site-packages): "
            + ", ".join(outside[:8])
            + (" ..." if len(outside) > 8 else "")
        )
    with tempfile.TemporaryDirectory(prefix="patches-import-") as tmp:
        made = gitrepo.format_patches(git_dir, base_commit, head_commit, folder, PACKAGE, Path(tmp))
        out.mkdir(parents=True, exist_ok=True)
        for path in made:
            text = path.read_text()
            if "\nGIT binary patch" in text or "\nBinary files " in text:
                shutil.rmtree(out, ignore_errors=True)
                raise UsageError(
                    f"{path.name} changes a binary file: the series applier reads text diffs only",
                    hint="keep binary files out of the fork's commits over the release, or build the "
                    "fork itself (image.source kind git)",
                )
            try:
                unidiff.parse(text)
            except unidiff.PatchFormatError:
                result.left_out.append(f"{path.name}: no text change under {prefix}{PACKAGE}/")
                continue
            shutil.copy2(path, out / path.name)
            result.names.append(path.name)
    header = [
        f"# Imported by `deploytool patches import` from {repo}:",
        f"#   {base} ({base_commit}) .. {head} ({head_commit}),",
        f"#   paths relative to {folder or 'the top'}/ (sglang {version}'s site-packages layout).",
        "# Applied in this order; use with image.source: {kind: wheel, series: THIS FOLDER}.",
    ]
    (out / "series").write_text("\n".join(header + result.names) + "\n")
    _write_memory_effects(out, repo, result.names)
    return result


def _write_memory_effects(out: Path, repo: str, names: list[str]) -> None:
    """memory.yaml beside `series` (the memory planner wants an entry per patch): no effect
    declared, so the planner treats these commits as it treats the fork itself, as stock
    sglang, until someone names what a patch changes in the pools."""
    import yaml

    entries = {}
    for name in names:
        text = (out / name).read_text()
        commit = text.split(" ", 2)[1] if text.startswith("From ") else "?"
        subject = next(
            (line.split("]", 1)[-1].strip() for line in text.splitlines() if line.startswith("Subject:")),
            name,
        )
        entries[name] = {
            "effects": [],
            "why": f"imported from {repo} commit {commit[:12]} ({subject}); "
            "not reviewed for memory effects: name them here if it changes the pools",
        }
    header = (
        "# What each patch of `series` changes in SGLang's memory accounting, for `deploytool plan-memory`\n"
        "# (docs/memory.md). Written by `deploytool patches import` with no effect declared: the planner\n"
        "# plans these commits as stock sglang, as it plans a fork. Declare a patch's effects when it\n"
        "# changes what the KV pool gets.\n"
    )
    (out / "memory.yaml").write_text(
        header + yaml.safe_dump({"patches": entries}, sort_keys=False, width=100)
    )
