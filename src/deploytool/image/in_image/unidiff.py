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
hunk of every file of a patch applies.

    python unidiff.py apply --root SITE_PACKAGES --series DIR/series     (exit 1 on a refusal)
"""

from __future__ import annotations

import argparse
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
                    raise PatchFormatError(f"hunk {hunk.header!r}: the header says {old_len} old and {new_len} new "
                                           f"lines, the body has {seen_old} and {seen_new}")
                while i < len(lines) and lines[i].startswith("\\"):
                    i += 1
                if i < len(lines) and lines[i][:1] in (" ", "+", "-") and not _file_header(lines, i) \
                        and lines[i] != "-- ":  # "-- " starts a mail signature (git format-patch)
                    raise PatchFormatError(f"line {i + 1}: {lines[i][:40]!r} follows hunk {hunk.header!r} "
                                           "beyond the line counts of its header")
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
    for distance in range(0, max(expected, last - expected) + 1):
        for at in (expected - distance, expected + distance) if distance else (expected,):
            if floor <= at <= last and content[at:at + len(old)] == old:
                return at
    return None


def apply_patch(root: Path, name: str, text: str, *, dry_run: bool = False, strip: int = 1) -> PatchResult:
    result = PatchResult(name=name, sha256=hashlib.sha256(text.encode()).hexdigest(), applied=False)
    try:
        file_patches = parse(text, strip)
    except PatchFormatError as exc:
        result.error = f"not a unified diff: {exc}"
        return result
    staged: dict[Path, str | None] = {}
    for fp in file_patches:
        result.files.append(fp.path)
        target = root / fp.path
        if fp.old_path is None:
            if target.exists():
                result.rejections.append(Rejection(name, fp.path, 1, "file to create already exists", fp.hunks[0].text() if fp.hunks else ""))
                continue
            content: list[str] = []
            ends_nl = True
        else:
            source = root / fp.old_path
            if not source.is_file():
                result.rejections.append(Rejection(name, fp.path, 1, f"file {fp.old_path} does not exist", fp.hunks[0].text() if fp.hunks else ""))
                continue
            raw = _read(source)
            ends_nl = raw.endswith("\n")
            content = _lines(raw)
        offset = 0
        floor = 0  # a hunk never matches above the end of the previous one (as GNU patch)
        for number, hunk in enumerate(fp.hunks, start=1):
            expected = max(0, hunk.old_start - 1 + offset) if hunk.old else max(0, hunk.old_start + offset)
            at = _find(content, hunk.old, expected, floor)
            if at is None:
                result.rejections.append(Rejection(name, fp.path, number, "context or removed lines do not match", hunk.text()))
                continue
            content[at:at + len(hunk.old)] = hunk.new
            offset += len(hunk.new) - len(hunk.old)
            floor = at + len(hunk.new)
        staged[target] = None if fp.new_path is None else "\n".join(content) + ("\n" if ends_nl and content else "")
    if result.rejections:
        return result
    result.applied = True
    if not dry_run:
        for target, new_text in staged.items():
            if new_text is None:
                target.unlink()
            else:
                # A new file renamed over the old one: never writes through a hard link into
                # the tree it was copied from (patches check links the cached sources).
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(f".{target.name}.unidiff-tmp")
                tmp.write_bytes(new_text.encode("utf-8"))
                if target.exists():
                    tmp.chmod(target.stat().st_mode & 0o7777)
                tmp.replace(target)
    return result


def read_series(series: Path) -> list[str]:
    """Patch names of a `series` file, in order (blank lines and # comments skipped)."""
    names = []
    for line in series.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def apply_series(root: Path, patch_dir: Path, names: list[str], *, dry_run: bool = False) -> list[PatchResult]:
    """Each patch in order; a refused patch stops the series (later ones would build on it)."""
    results = []
    for name in names:
        path = patch_dir / name
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
            print(f"  {rej.file}, hunk {rej.hunk}: {rej.reason}\n" + "\n".join("    " + x for x in rej.text.splitlines()),
                  file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
