"""The patches of the harness's patched plan, applied to a copy of the overlay's site-packages.

The overlay ($W/site) is unpacked once and kept between calls on a warm machine, and every
other plan runs on it: it must stay the stock release. So the patched plan gets its own
copy, made of hard links (seconds, not a copy of the whole overlay), in which each file a patch
changes is first replaced by a file of its own, so the change never reaches the shared inode.
Made afresh on every call, so a second patched run starts from the stock files again.

Stdlib only: it runs under the GPU host's Python, and in the dry run on the build machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def patch_names(folder: Path) -> list[str]:
    """The patches in the order the folder's `series` file names them (as deploytool's series
    are kept), else every *.patch by name."""
    series = folder / "series"
    if series.is_file():
        names = [line.split("#", 1)[0].strip() for line in series.read_text().splitlines()]
        return [n for n in names if n]
    return sorted(p.name for p in folder.glob("*.patch")) if folder.is_dir() else []


def touched(patch: Path, strip: int) -> list[str]:
    """The paths a unified diff writes (`+++` lines), less `strip` leading folders."""
    out = []
    for line in patch.read_text(errors="replace").splitlines():
        if line.startswith("+++ "):
            path = line[4:].split("\t", 1)[0].strip()
            if path != "/dev/null":
                out.append("/".join(path.split("/")[strip:]))
    return out


def linked_copy(site: Path, dest: Path) -> Path:
    """A copy of `site` made of hard links (a plain copy where linking fails)."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(site, dest, copy_function=link, symlinks=True)
    return dest


def unshare(path: Path) -> None:
    """Give a hard-linked file an inode of its own, so changing it leaves its twin alone."""
    if path.is_file() and not path.is_symlink() and path.stat().st_nlink > 1:
        private = path.with_name(path.name + ".unshared")
        shutil.copy2(path, private)
        private.replace(path)


def apply_to_copy(site: Path, folder: Path, names: list[str], dest: Path) -> dict:
    """Each patch of `names` from `folder`, in order, applied to a hard-linked copy of `site`
    at `dest` (tried at -p0..-p3, so a patch written against a source tree's python/sglang/...
    or against sglang/... both apply). Returns {"applied": bool, "site": dest, "patches": [...]}."""
    if not names:
        return {"applied": False, "why": f"no patch in {folder} (a `series` file or *.patch)"}
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        return {"applied": False, "why": f"{', '.join(missing)} not in {folder}"}
    linked_copy(site, dest)
    done = []
    for name in names:
        patch = folder / name
        for strip in range(4):
            dry = subprocess.run(
                ["patch", f"-p{strip}", "--dry-run", "-d", str(dest), "-i", str(patch)],
                capture_output=True,
                text=True,
            )
            if dry.returncode == 0:
                for rel in touched(patch, strip):
                    unshare(dest / rel)
                real = subprocess.run(
                    ["patch", f"-p{strip}", "-d", str(dest), "-i", str(patch)], capture_output=True, text=True
                )
                done.append(
                    {"patch": name, "strip": strip, "rc": real.returncode, "out": real.stdout[-2000:]}
                )
                break
        else:
            done.append(
                {"patch": name, "rc": "does not apply", "out": dry.stdout[-2000:] + dry.stderr[-500:]}
            )
    return {"applied": all(d["rc"] == 0 for d in done), "site": str(dest), "patches": done}
