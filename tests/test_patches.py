"""The patch series: the applier on small trees, then the shipped series against the real
pinned sglang wheel (downloaded once into the shared test cache), a broken patch reported
with its refused hunk. The patched modules' changed behaviour, on a CPU, is
tests/test_memory_patches_on_cpu.py's."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from deploytool.image import patches
from deploytool.image.in_image import unidiff
from deploytool.profiles import ProfileStore

CARD = "rtx5090-qwen3.6-35b-a3b-nvfp4"
SGLANG = "0.5.23"


def _tree(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(text)
    return root


PATCH = textwrap.dedent("""\
    Subject: change b

    --- a/pkg/mod.py
    +++ b/pkg/mod.py
    @@ -2,3 +2,3 @@
     a = 1
    -b = 2
    +b = 3
     c = 4
    """)


def test_applier_moves_a_hunk_to_where_its_context_is(tmp_path: Path) -> None:
    root = _tree(tmp_path, "# one\n# two more lines above\n# here\nx = 0\na = 1\nb = 2\nc = 4\n")
    result = unidiff.apply_patch(root, "p", PATCH)
    assert result.applied and result.files == ["pkg/mod.py"]
    assert (root / "pkg" / "mod.py").read_text().endswith("a = 1\nb = 3\nc = 4\n")


def test_applier_refuses_a_changed_context_and_writes_nothing(tmp_path: Path) -> None:
    original = "x = 0\na = 1\nb = 20\nc = 4\n"
    root = _tree(tmp_path, original)
    result = unidiff.apply_patch(root, "p", PATCH)
    assert not result.applied
    [rejection] = result.rejections
    assert (rejection.file, rejection.hunk) == ("pkg/mod.py", 1)
    assert "-b = 2" in rejection.text and "+b = 3" in rejection.text
    assert (root / "pkg" / "mod.py").read_text() == original


def test_applier_creates_and_series_stops_at_the_first_failure(tmp_path: Path) -> None:
    root = _tree(tmp_path, "x = 0\na = 1\nb = 2\nc = 4\n")
    folder = tmp_path / "series"
    folder.mkdir()
    (folder / "0001-new.patch").write_text("--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1,2 @@\n+one\n+two\n")
    (folder / "0002-bad.patch").write_text(PATCH.replace(" a = 1", " a = 100"))
    (folder / "0003-b.patch").write_text(PATCH)
    (folder / "series").write_text("# order\n0001-new.patch\n0002-bad.patch  # broken\n0003-b.patch\n")
    results = unidiff.apply_series(root, folder, unidiff.read_series(folder / "series"))
    assert [(r.name, r.applied) for r in results] == [("0001-new.patch", True), ("0002-bad.patch", False)]
    assert (root / "pkg" / "new.py").read_text() == "one\ntwo\n"


def test_series_of_a_profile_is_the_shipped_series_file() -> None:
    profile = ProfileStore().get(CARD)
    series = patches.series_for(profile)
    assert series.sglang_version == SGLANG
    assert series.names == unidiff.read_series(patches.series_dir(SGLANG) / "series")
    assert series.names and all(p.is_file() for p in series.paths())


# -- against the real pinned wheel ------------------------------------------------------------
@pytest.mark.index
def test_shipped_series_applies_to_the_pinned_wheel() -> None:
    profile = ProfileStore().get(CARD)
    report = patches.check(profile)
    assert report.wheel.startswith(f"sglang-{SGLANG}-")
    assert report.ok, [r.rejections for r in report.results]
    assert [r.name for r in report.results] == patches.series_for(profile).names
    assert "sglang/srt/utils/common.py" in report.results[0].files
    # the cached sources stay unpatched: the check worked on links in a temporary folder
    sources = patches.unpacked_sources(patches.sglang_wheel(SGLANG, profile.image.python))
    assert "_get_device_capability_via_nvml" not in (sources / "sglang/srt/utils/common.py").read_text()


@pytest.mark.index
@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_gnu_patch_agrees_that_the_series_applies(tmp_path: Path) -> None:
    profile = ProfileStore().get(CARD)
    sources = patches.unpacked_sources(patches.sglang_wheel(SGLANG, profile.image.python))
    for path in patches.series_for(profile).paths():
        proc = subprocess.run(
            ["patch", "-p1", "--dry-run", "--fuzz=0", "-d", str(sources), "-i", str(path)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.index
def test_a_broken_patch_is_reported_with_its_rejected_hunk(tmp_path: Path) -> None:
    profile = ProfileStore().get(CARD)
    shipped = patches.series_for(profile)
    text = shipped.paths()[0].read_text()
    # Break the context of one hunk: the line it expects no longer reads that way.
    needle = "def get_device_capability(device_id: int = 0) -> Tuple[int, int]:"
    assert needle in text
    (tmp_path / "0001-broken.patch").write_text(text.replace(needle, needle.replace("device_id", "gpu_id")))
    broken = patches.PatchSeries(sglang_version=SGLANG, folder=tmp_path, names=["0001-broken.patch"])
    report = patches.check(profile, series=broken)
    assert not report.ok
    [result] = report.results
    assert not result.applied
    [rejection] = result.rejections
    assert rejection.file == "sglang/srt/utils/common.py"
    assert "def get_device_capability(gpu_id: int = 0)" in rejection.text
    assert rejection.text.startswith("@@ ")


@pytest.mark.index
def test_cli_patches_check(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from deploytool.cli import app
    from deploytool.errors import ProfileError

    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "bad.yaml").write_text(
        f"name: bad-patches\nextends: {CARD}\nimage:\n  patches: [0001-nvml-device-capability.patch, nope.patch]\n"
    )
    result = CliRunner().invoke(
        app, ["patches", "check", "--profile", "bad-patches", "--profiles-dir", str(folder)]
    )
    assert isinstance(result.exception, ProfileError) and "nope.patch" in str(result.exception)

    result = CliRunner().invoke(app, ["patches", "check", "--profile", CARD, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout[result.stdout.index("{") :])
    assert data["ok"] is True and data["results"][0]["applied"] is True


def test_applier_refuses_hunks_whose_body_does_not_match_the_header_counts(tmp_path: Path) -> None:
    original = "x = 0\na = 1\nb = 2\nc = 4\nd = 5\n"
    root = _tree(tmp_path, original)
    # an extra '+' line after the header's counts: it used to be dropped and the patch "applied"
    extra = PATCH + "+e = 6\n"
    # a truncated hunk: the header claims 3 old lines, the body has 1
    truncated = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -2,3 +2,3 @@\n-a = 1\n"
    # a removed line after the counts, before the next hunk
    stray = PATCH + "-d = 5\n@@ -5,1 +5,1 @@\n-d = 5\n+d = 50\n"
    for text in (extra, truncated, stray):
        result = unidiff.apply_patch(root, "p", text)
        assert not result.applied and result.error and "not a unified diff" in result.error, text
        assert (root / "pkg" / "mod.py").read_text() == original
    with pytest.raises(unidiff.PatchFormatError, match="header says 3 old and 3 new"):
        unidiff.parse(truncated)
    # a git format-patch mail signature after the last hunk is not a hunk line
    signed = PATCH + "-- \n2.43.0\n"
    root2 = _tree(tmp_path / "signed", "x = 0\na = 1\nb = 2\nc = 4\n")
    assert unidiff.apply_patch(root2, "p", signed).applied


def test_applier_keeps_bytes_outside_the_hunks(tmp_path: Path) -> None:
    original = "x = 0\r\na = 1\r\n\x0c\r\nb = 2\r\nc = 4\r\ns = 'u\u2028v\x1cw\x85z\x0bq'\nlast\n"
    root = tmp_path / "tree"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_bytes(original.encode())
    patch = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -3,3 +3,3 @@\n \x0c\r\n-b = 2\r\n+b = 3\r\n c = 4\r\n"
    (tmp_path / "0001.patch").write_bytes(patch.encode())
    [result] = unidiff.apply_series(root, tmp_path, ["0001.patch"])
    assert result.applied, (result.error, result.rejections)
    assert (root / "pkg" / "mod.py").read_bytes() == original.replace("b = 2", "b = 3").encode()


def test_a_later_hunk_never_matches_above_the_previous_one(tmp_path: Path) -> None:
    lines = ["keep"] + [f"f{n}" for n in range(2, 15)] + ["marker", "tail"]
    root = _tree(tmp_path, "\n".join(lines) + "\n")
    # hunk 1 inserts a "marker" line near the top; hunk 2 (whose header is off) changes the
    # original "marker" further down: the inserted one is nearer but lies above hunk 1's end.
    text = (
        "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n"
        "@@ -1,2 +1,4 @@\n keep\n+marker\n+fill\n f2\n"
        "@@ -4,1 +6,1 @@\n-marker\n+changed\n"
    )
    result = unidiff.apply_patch(root, "p", text)
    assert result.applied, result.rejections
    expected = ["keep", "marker", "fill", *lines[1:14], "changed", "tail"]
    assert (root / "pkg" / "mod.py").read_text() == "\n".join(expected) + "\n"
    if shutil.which("patch"):  # GNU patch agrees
        gnu = _tree(tmp_path / "gnu", "\n".join(lines) + "\n")
        proc = subprocess.run(
            ["patch", "-p1", "--fuzz=0", "-d", str(gnu)], input=text, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (gnu / "pkg" / "mod.py").read_text() == "\n".join(expected) + "\n"


def test_a_missing_patch_folder_or_series_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deploytool.errors import ProfileError

    profile = ProfileStore().get(CARD)
    folder = tmp_path / "patches" / SGLANG
    monkeypatch.setattr(patches, "series_dir", lambda version: folder)
    with pytest.raises(ProfileError) as info:  # no folder at all
        patches.series_for(profile)
    assert "image.runtime_version" in str(info.value) and str(folder) in str(info.value)
    folder.mkdir(parents=True)
    with pytest.raises(ProfileError) as info:  # a folder without its series file
        patches.series_for(profile)
    assert "image.runtime_version" in str(info.value) and str(folder / "series") in str(info.value)
    (folder / "series").write_text("# no patches for this release, on purpose\n")
    assert patches.series_for(profile).names == []  # an empty series stays allowed
