"""A patch series is someone else's file: its paths stay in the tree it patches (absolute paths,
`..`, NUL and links out refused before anything is written), and a patch applies whole or not
at all, even when a write fails half-way."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploytool.errors import ProfileError
from deploytool.image import patches
from deploytool.image.in_image import unidiff
from deploytool.profiles import ProfileStore


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("a = 1\nb = 2\n")
    return root


def _create(path: str) -> str:
    return f"--- /dev/null\n+++ {path}\n@@ -0,0 +1 @@\n+owned\n"


def _modify_then(path: str) -> str:
    """A patch that changes pkg/mod.py first, then touches `path`."""
    return "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n" + _create(path)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "path",
    [
        "b/../outside.txt",
        "b/pkg/../../outside.txt",
        "b//tmp/OUTSIDE_ABS",
        "b/pkg/\x00x",
        "b/..",
        "b/pkg/..\\..\\outside.txt",
    ],
)
def test_a_path_out_of_the_tree_is_refused_before_anything_is_written(tmp_path, path):
    root = _tree(tmp_path)
    if "OUTSIDE_ABS" in path:
        path = "b/" + str(tmp_path / "OUTSIDE_ABS")
    before = _files(tmp_path)
    result = unidiff.apply_patch(root, "evil.patch", _modify_then(path))
    assert not result.applied and "leaves the tree" in (result.error or "")
    assert _files(tmp_path) == before  # not even pkg/mod.py, which came first


def test_a_link_in_the_tree_that_points_out_is_refused(tmp_path):
    root = _tree(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (root / "pkg" / "link").symlink_to(tmp_path / "elsewhere")
    result = unidiff.apply_patch(root, "evil.patch", _create("b/pkg/link/owned.txt"))
    assert not result.applied and "outside the tree" in (result.error or "")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_series_name_that_climbs_out_is_refused(tmp_path):
    root = _tree(tmp_path)
    (tmp_path / "series").mkdir()
    (tmp_path / "evil.patch").write_text(_create("b/new.txt"))
    [result] = unidiff.apply_series(root, tmp_path / "series", ["../evil.patch"])
    assert not result.applied and "not a patch of" in (result.error or "")
    assert not (root / "new.txt").exists()


def test_a_profile_naming_a_patch_outside_its_folder_is_refused():
    profile = ProfileStore().get("rtx5090-qwen3.6-35b-a3b-nvfp4").model_copy(deep=True)
    profile.image.patches = ["../../../../etc/passwd"]
    with pytest.raises(ProfileError, match="not files of"):
        patches.series_for(profile)


def test_a_write_that_fails_half_way_leaves_the_tree_as_it_was(tmp_path):
    root = _tree(tmp_path)
    (root / "blocker").write_text("a file where the patch wants a folder\n")
    before = _files(root)
    result = unidiff.apply_patch(root, "p.patch", _modify_then("b/blocker/new.txt"))
    assert not result.applied and "the tree is as it was" in (result.error or "")
    assert _files(root) == before


def test_a_patch_that_applies_still_writes_every_file(tmp_path):
    root = _tree(tmp_path)
    result = unidiff.apply_patch(root, "p.patch", _modify_then("b/pkg/deep/new.txt"))
    assert result.applied, result
    assert (root / "pkg" / "mod.py").read_text() == "a = 1\nb = 3\n"
    assert (root / "pkg" / "deep" / "new.txt").read_text() == "owned\n"
