"""Apply a series of unified diffs to a source tree, strictly, and say which hunk was refused.

One applier for both places a patch series is applied: `deploytool patches check` (on the
host, against the pinned wheel's sources) and the `sglang` image build (inside the image,
against the installed package), so a series that checks clean is the series that builds.
It runs with the standard library only, because the image has no `patch` or `git`.

Rules (those of `patch -p1 --fuzz=0`): every context and removed line must match exactly;
a hunk may move by any number of lines from where its header says (the file may have
grown above it), and the nearest match wins, but never above the end of the previous hunk
of the same file. A hunk's body must have exactly the line counts its `@@` header says.
Lines are split on "\n" only, so every other byte (\r, form feeds, ...) is kept as it is.
A file is created from /dev/null and deleted to /dev/null. Nothing is written unless every
hunk of every file of a patch applies, and a write that fails half-way puts back what the
patch had written: a patch applies whole or not at all.

Paths stay in the tree: a patch is someone else's file, so a path that is absolute, climbs
with `..`, holds a NUL or a control character, or resolves (through a link in the tree) outside
the root is refused before anything is read or written; so is a patch name in a series.

    python unidiff.py apply --root SITE_PACKAGES --series DIR/series     (exit 1 on a refusal)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    old_start: int
    header: str
    lines: list[str] = field(default_factory=list)  # with their ' ', '-', '+' prefix

    @property
    def old(self) -> list[str]:
        return [line[1:] for line in self.lines if line[:1] in (" ", "-")]

    @property
    def new(self) -> list[str]:
        return [line[1:] for line in self.lines if line[:1] in (" ", "+")]

    def text(self) -> str:
        return "\n".join([self.header, *self.lines])


@dataclass
class FilePatch:
    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or "?"


@dataclass
class Rejection:
    patch: str
    file: str
    hunk: int  # 1-based, in the file's order
    reason: str
    text: str  # the hunk as written in the patch


@dataclass
class PatchResult:
    name: str
    sha256: str
    applied: bool
    files: list[str] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    error: str | None = None


class PatchFormatError(ValueError):
    pass


def parse(text: str, strip: int = 1) -> list[FilePatch]:
    """The file patches of a unified diff (leading commentary, as in a mail, is skipped)."""
    files: list[FilePatch] = []
    lines = _lines(text)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            fp = FilePatch(old_path=_strip(line[4:], strip), new_path=_strip(lines[i + 1][4:], strip))
            files.append(fp)
            i += 2
            while i < len(lines) and lines[i].startswith("@@"):
                match = _HUNK.match(lines[i])
                if not match:
                    raise PatchFormatError(f"line {i + 1}: malformed hunk header {lines[i]!r}")
                old_len = int(match.group(2) or 1)
                new_len = int(match.group(4) or 1)
                hunk = Hunk(old_start=int(match.group(1)), header=lines[i])
                i += 1
                seen_old = seen_new = 0
                while i < len(lines) and (seen_old < old_len or seen_new < new_len):
                    body = lines[i]
                    if body.startswith("\\"):  # "\ No newline at end of file"
                        i += 1
                        continue
                    tag = body[:1] or " "  # an empty line is an empty context line
                    if tag not in " -+":
                        raise PatchFormatError(f"line {i + 1}: hunk ends early ({body[:40]!r})")
                    hunk.lines.append(tag + body[1:])
                    seen_old += tag in " -"
                    seen_new += tag in " +"
                    i += 1
                if (seen_old, seen_new) != (old_len, new_len):
                    raise PatchFormatError(
                        f"hunk {hunk.header!r}: the header says {old_len} old and {new_len} new "
                        f"lines, the body has {seen_old} and {seen_new}"
                    )
                while i < len(lines) and lines[i].startswith("\\"):
                    i += 1
                if (
                    i < len(lines)
                    and lines[i][:1] in (" ", "+", "-")
                    and not _file_header(lines, i)
                    and lines[i] != "-- "
                ):  # "-- " starts a mail signature (git format-patch)
                    raise PatchFormatError(
                        f"line {i + 1}: {lines[i][:40]!r} follows hunk {hunk.header!r} "
                        "beyond the line counts of its header"
                    )
                fp.hunks.append(hunk)
            continue
        i += 1
    if not files:
        raise PatchFormatError("no file patch (no '--- a/...' / '+++ b/...' pair) found")
    return files


def _lines(text: str) -> list[str]:
    """Lines split on "\n" only (str.splitlines would also split on \r, form feeds, ...)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _file_header(lines: list[str], i: int) -> bool:
    return lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


def _read(path: Path) -> str:
    """The file's text exactly as stored (no newline translation)."""
    return path.read_bytes().decode("utf-8")


def _strip(raw: str, strip: int) -> str | None:
    path = raw.split("\t")[0].strip()
    if path == "/dev/null":
        return None
    parts = path.split("/")
    return "/".join(parts[strip:]) if len(parts) > strip else path


def _find(content: list[str], old: list[str], expected: int, floor: int = 0) -> int | None:
    """Where `old` occurs in `content` at or below line index `floor`, nearest to `expected`."""
    if not old:
        return max(floor, min(expected, len(content)))
    last = len(content) - len(old)
    for distance in range(max(expected, last - expected) + 1):
        for at in (expected - distance, expected + distance) if distance else (expected,):
            if floor <= at <= last and content[at : at + len(old)] == old:
                return at
    return None


def unsafe_path(path: str) -> str | None:
    """Why `path` (relative to a tree) cannot be one of its files, or None."""
    if not path or path in (".", "./"):
        return "an empty path"
    if any(ord(c) < 32 or c == "\x7f" for c in path):
        return "a control character (NUL, newline, ...) in the path"
    if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", path):
        return "an absolute path"
    if ".." in re.split(r"[/\\]", path):
        return "a `..` that climbs out of the tree"
    return None


def inside(root: Path, path: str) -> Path:
    """root/path, refused (ValueError) when it is not a file of the tree, links followed."""
    why = unsafe_path(path)
    if why:
        raise ValueError(f"{path!r}: {why}")
    base = root.resolve()
    target = (root / path).resolve()
    if target != base and base not in target.parents:
        raise ValueError(f"{path!r} resolves outside the tree ({target})")
    return root / path


def apply_patch(root: Path, name: str, text: str, *, dry_run: bool = False, strip: int = 1) -> PatchResult:
    result = PatchResult(name=name, sha256=hashlib.sha256(text.encode()).hexdigest(), applied=False)
    try:
        file_patches = parse(text, strip)
    except PatchFormatError as exc:
        result.error = f"not a unified diff: {exc}"
        return result
    try:  # every path first: nothing is read or written before all of them are the tree's
        for fp in file_patches:
            for path in (fp.old_path, fp.new_path):
                if path is not None:
                    inside(root, path)
    except ValueError as exc:
        result.files = [fp.path for fp in file_patches]
        result.error = f"a path leaves the tree: {exc}"
        return result
    staged: dict[Path, str | None] = {}
    for fp in file_patches:
        result.files.append(fp.path)
        target = root / fp.path
        if fp.old_path is None:
            if target.exists() or target in staged:
                result.rejections.append(
                    Rejection(
                        name,
                        fp.path,
                        1,
                        "file to create already exists",
                        fp.hunks[0].text() if fp.hunks else "",
                    )
                )
                continue
            content: list[str] = []
            ends_nl = True
        else:
            source = root / fp.old_path
            if source in staged and staged[source] is not None:  # the same file twice in one patch
                raw = staged[source] or ""
            elif not source.is_file() or source in staged:
                result.rejections.append(
                    Rejection(
                        name,
                        fp.path,
                        1,
                        f"file {fp.old_path} does not exist",
                        fp.hunks[0].text() if fp.hunks else "",
                    )
                )
                continue
            else:
                raw = _read(source)
            ends_nl = raw.endswith("\n")
            content = _lines(raw)
        offset = 0
        floor = 0  # a hunk never matches above the end of the previous one (as GNU patch)
        for number, hunk in enumerate(fp.hunks, start=1):
            expected = max(0, hunk.old_start - 1 + offset) if hunk.old else max(0, hunk.old_start + offset)
            at = _find(content, hunk.old, expected, floor)
            if at is None:
                result.rejections.append(
                    Rejection(name, fp.path, number, "context or removed lines do not match", hunk.text())
                )
                continue
            content[at : at + len(hunk.old)] = hunk.new
            offset += len(hunk.new) - len(hunk.old)
            floor = at + len(hunk.new)
        staged[target] = (
            None if fp.new_path is None else "\n".join(content) + ("\n" if ends_nl and content else "")
        )
    if result.rejections:
        return result
    if not dry_run:
        try:
            _write(staged)
        except OSError as exc:
            result.error = f"could not write the patched files ({exc}); the tree is as it was"
            return result
    result.applied = True
    return result


def _write(staged: dict[Path, str | None]) -> None:
    """Write every staged file, or on a failure put back each one already written (its bytes
    and mode) and remove the files and folders it created, then raise."""
    undo: list[tuple[Path, bytes | None, int | None]] = []  # (path, old bytes or None: new file, old mode)
    made: list[Path] = []
    try:
        for target, new_text in staged.items():
            old = target.read_bytes() if target.is_file() else None
            mode = target.stat().st_mode & 0o7777 if old is not None else None
            missing = [p for p in [target.parent, *target.parent.parents] if not p.exists()]
            if new_text is None:
                target.unlink()
                undo.append((target, old, mode))
                continue
            # A new file renamed over the old one: never writes through a hard link into
            # the tree it was copied from (patches check links the cached sources).
            target.parent.mkdir(parents=True, exist_ok=True)
            made += reversed(missing)
            tmp = target.with_name(f".{target.name}.unidiff-tmp")
            tmp.write_bytes(new_text.encode("utf-8"))
            if mode is not None:
                tmp.chmod(mode)
            undo.append((target, old, mode))
            tmp.replace(target)
    except OSError:
        for target in staged:
            with contextlib.suppress(OSError):
                target.with_name(f".{target.name}.unidiff-tmp").unlink(missing_ok=True)
        for target, old, mode in reversed(undo):
            if old is None:
                target.unlink(missing_ok=True)
            else:
                tmp = target.with_name(f".{target.name}.unidiff-undo")
                tmp.write_bytes(old)
                if mode is not None:
                    tmp.chmod(mode)
                tmp.replace(target)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def read_series(series: Path) -> list[str]:
    """Patch names of a `series` file, in order (blank lines and # comments skipped)."""
    names = []
    for line in series.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def apply_series(
    root: Path, patch_dir: Path, names: list[str], *, dry_run: bool = False
) -> list[PatchResult]:
    """Each patch in order; a refused patch stops the series (later ones would build on it)."""
    results = []
    for name in names:
        try:
            path = inside(patch_dir, name)
        except ValueError as exc:
            results.append(
                PatchResult(name=name, sha256="", applied=False, error=f"not a patch of {patch_dir}: {exc}")
            )
            break
        if not path.is_file():
            results.append(PatchResult(name=name, sha256="", applied=False, error=f"{path} does not exist"))
            break
        result = apply_patch(root, name, _read(path), dry_run=dry_run)
        results.append(result)
        if not result.applied:
            break
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="unidiff.py")
    sub = parser.add_subparsers(dest="command", required=True)
    apply_cmd = sub.add_parser("apply", help="apply a patch series to a tree")
    apply_cmd.add_argument("--root", required=True, type=Path)
    apply_cmd.add_argument("--series", required=True, type=Path)
    apply_cmd.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    names = read_series(args.series)
    results = apply_series(args.root, args.series.parent, names, dry_run=args.dry_run)
    for r in results:
        if r.applied:
            print(f"patch {r.name}: applied to {', '.join(r.files)} (sha256 {r.sha256[:12]})")
            continue
        print(f"patch {r.name}: FAILED: {r.error or 'a hunk does not apply'}", file=sys.stderr)
        for rej in r.rejections:
            print(
                f"  {rej.file}, hunk {rej.hunk}: {rej.reason}\n"
                + "\n".join("    " + x for x in rej.text.splitlines()),
                file=sys.stderr,
            )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
