"""A real fork: a git repository made here from the pinned sglang release's sources (laid out as
upstream's, under python/), with one commit that adds a launch flag and one that changes a
file. Its parser checks the profile's flags, its commits become a patch series that applies to
the release, and (on the real engine) it builds into a CPU image with a local wheel in place
of the index's twin, whose labels name the commit."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import run_cli
from fork_repo import PYPROJECT, commit_all, git, profile_yaml, rebuild_wheel, sha256
from deploytool.errors import ProfileError
from deploytool.host import labels
from deploytool.image import flagcheck, patches
from deploytool.image.build import build, plan_build
from deploytool.profiles import ProfileStore

SGLANG = "0.5.23"
FORK_VERSION = "0.5.23+fork.sm120"
TEST_PROFILES = Path(__file__).parent / "profiles_sglang"
FLAG = "fork-small-batch-kernels"
DEVICE = "sglang/srt/arg_groups/fields/device.py"
COMMON = "sglang/srt/utils/common.py"
ANCHOR = '    sleep_on_idle: A[bool, "Reduce CPU usage when sglang is idle."] = False\n'
FIELD = ('    fork_small_batch_kernels: A[\n        bool,\n'
         '        "Use the fork\'s SM120 small-batch kernels.",\n    ] = False\n')
MARKER = 'FORK_MARKER = "small-batch kernels"\n'

pytestmark = pytest.mark.index  # the pinned sglang wheel, downloaded once into the shared cache


def _rewrite(path: Path, text: str) -> None:
    """A new file in place of the old: the tree is hard links into the cached release sources."""
    path.unlink()
    path.write_text(text)


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory, module_home: Path) -> SimpleNamespace:
    release = patches.unpacked_sources(patches.sglang_wheel(SGLANG, "3.11"))
    root = tmp_path_factory.mktemp("fork")
    repo = root / "sglang"
    (repo / "python").mkdir(parents=True)
    patches.link_tree(release / "sglang", repo / "python" / "sglang")
    (repo / "python" / "pyproject.toml").write_text(PYPROJECT.format(version=SGLANG))
    (repo / "README.md").write_text("an sglang fork\n")
    git(repo, "init", "-q")
    base = commit_all(repo, f"sglang {SGLANG}")
    git(repo, "tag", f"v{SGLANG}")

    device = repo / "python" / DEVICE
    assert ANCHOR in device.read_text()
    _rewrite(device, device.read_text().replace(ANCHOR, ANCHOR + FIELD))
    _rewrite(repo / "python" / "pyproject.toml", PYPROJECT.format(version=FORK_VERSION))
    flag = commit_all(repo, f"add --{FLAG}")
    common = repo / "python" / COMMON
    _rewrite(common, common.read_text() + "\n" + MARKER)
    head = commit_all(repo, "a changed file")
    profiles = root / "profiles"
    profiles.mkdir()
    return SimpleNamespace(repo=repo, base=base, flag=flag, head=head, profiles=profiles, root=root)


def _profile(fork: SimpleNamespace, name: str, source: dict, **kwargs):
    (fork.profiles / f"{name}.yaml").write_text(profile_yaml(name, source, **kwargs))
    return ProfileStore([TEST_PROFILES, fork.profiles]).get(name)


def _git_source(fork: SimpleNamespace, commit: str | None = None) -> dict:
    return {"kind": "git", "repo": str(fork.repo), "commit": commit or fork.head}


def test_profiles_check_runs_the_forks_parser_keyed_by_its_commit(fork: SimpleNamespace) -> None:
    profile = _profile(fork, "fork-flags", _git_source(fork), args={FLAG: True})
    check = flagcheck.check(profile, use_image=False)
    assert check.ok, [(f.flag, f.message) for f in check.failures]
    assert [f.status for f in check.findings if f.flag == f"--{FLAG}"] == ["ok"]
    assert f"runtime-src/git-{fork.head}/tree/python" in check.where  # the fork's sources, unpacked per commit

    _profile(fork, "fork-typo", _git_source(fork), args={FLAG[:-1]: True})
    out = run_cli("profiles", "check", "--profile", "fork-typo", "--no-image", "--json",
                  "--profiles-dir", str(TEST_PROFILES), "--profiles-dir", str(fork.profiles))
    assert out.returncode == 1, out.stderr
    [failure] = [f for f in json.loads(out.stdout)["findings"] if f["status"] != "ok" and f["status"] != "redundant"
                 and f["status"] != "overridden"]
    assert (failure["flag"], failure["status"]) == (f"--{FLAG[:-1]}", "unknown")
    assert f"--{FLAG}" in failure["suggestions"]

    # the pinned release's own parser has no such flag: the fork's is the one that was read
    release = _profile(fork, "release-flags", {"kind": "wheel"}, args={FLAG: True})
    plain = flagcheck.check(release, use_image=False)
    assert [f.status for f in plain.findings if f.flag == f"--{FLAG}"] == ["unknown"]


def test_patches_import_writes_the_forks_commits_as_a_series_the_release_takes(fork: SimpleNamespace) -> None:
    series = fork.root / "series"
    out = run_cli("patches", "import", "--from", str(fork.repo), "--base", f"v{SGLANG}", "--head", fork.head,
                  "--out", str(series), "--json")
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout)
    assert (made["base_commit"], made["head_commit"], made["subdir"]) == (fork.base, fork.head, "python")
    assert len(made["names"]) == 2 and (series / "series").is_file()
    assert patches.unidiff.read_series(series / "series") == made["names"]
    first = (series / made["names"][0]).read_text()
    assert f"+++ b/{DEVICE}" in first and "pyproject.toml" not in first  # site-packages paths only
    assert made["left_out"] == ["changes outside python/sglang/ (not in site-packages): pyproject.toml"]
    assert f"+++ b/{COMMON}" in (series / made["names"][1]).read_text()

    # the memory planner reads the series' memory.yaml: one entry per patch, no effect declared
    from deploytool.memory.patch_effects import read_memory_effects

    declared = read_memory_effects(series, made["names"])
    assert [(p.patch, p.effects) for p in declared] == [(name, ()) for name in made["names"]]
    assert fork.head[:12] in declared[1].why

    _profile(fork, "release-series", {"kind": "wheel", "series": str(series)})
    out = run_cli("patches", "check", "--profile", "release-series", "--json",
                  "--profiles-dir", str(TEST_PROFILES), "--profiles-dir", str(fork.profiles))
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and [r["name"] for r in report["results"]] == made["names"]
    assert report["wheel"].startswith(f"sglang-{SGLANG}-")
    tree = patches.patched_tree(ProfileStore([TEST_PROFILES, fork.profiles]).get("release-series"),
                                fork.root / "patched")
    assert FIELD in (tree / DEVICE).read_text() and MARKER in (tree / COMMON).read_text()

    # profiles check reads the release with this series applied: the fork's flag is known there
    flagged = _profile(fork, "release-series-flag", {"kind": "wheel", "series": str(series)}, args={FLAG: True})
    check = flagcheck.check(flagged, use_image=False)
    assert [f.status for f in check.findings if f.flag == f"--{FLAG}"] == ["ok"], check.where
    assert "with the patched sources" in check.where

    again = run_cli("patches", "import", "--from", str(fork.repo), "--base", f"v{SGLANG}", "--head", fork.head,
                    "--out", str(series))
    assert again.returncode == 2 and "is not empty" in again.stderr


@pytest.mark.timeout(1800)
def test_a_fork_by_commit_builds_on_the_cpu_path_with_a_local_wheel(fork: SimpleNamespace, docker_engine,
                                                                     sglang_cpu_wheelhouse: Path,
                                                                     tmp_path: Path) -> None:
    house = sglang_cpu_wheelhouse  # the CPU test image's wheels
    [twin] = house.glob("nvidia_ml_py-*.whl")
    local_version = twin.name.split("-")[1] + "+deploytool.test"
    wheel = rebuild_wheel(twin, tmp_path, local_version)
    pinned = [{"file": str(wheel), "sha256": sha256(wheel)}]
    profile = _profile(fork, "fork-cpu-test", _git_source(fork), args={FLAG: True}, wheels=pinned)

    result = build(profile, engine=docker_engine, wheelhouse=house)
    image = docker_engine.image(result.image)
    source = json.loads(image.labels[labels.IMAGE_RUNTIME_SOURCE])
    # what the image holds, and no path of this host (the journal says where it was read)
    assert source == {"kind": "git", "commit": fork.head, "version": FORK_VERSION, "subdir": "python"}
    toolchain_label = json.loads(image.labels[labels.IMAGE_FINGERPRINT])
    assert toolchain_label["sglang_source"] == f"git {fork.head} python/ (sglang {FORK_VERSION})"
    assert json.loads(toolchain_label["local_wheels"]) == {"nvidia-ml-py": sha256(wheel)}
    assert json.loads(image.labels[labels.IMAGE_LOCAL_WHEELS]) == [
        {"name": "nvidia-ml-py", "version": local_version, "file": wheel.name, "sha256": sha256(wheel)}]

    # Inside: the fork's package as installed from its own metadata, its changed file, and the
    # local wheel alone where the index's twin would be.
    out = docker_engine.client.containers.run(
        result.image, remove=True, network_disabled=True, entrypoint=["sh", "-c"],
        command=["cat /opt/deploytool/toolchain.json; python -c 'from sglang.srt.utils.common import FORK_MARKER; "
                 "print(FORK_MARKER)'"]).decode()
    installed = json.loads(out[: out.rindex("}") + 1])
    assert installed["sglang"] == FORK_VERSION and installed["nvidia_ml_py"] == local_version
    assert [v for k, v in installed["installed"].items() if k.lower() == "nvidia-ml-py"] == [local_version]
    assert out.strip().endswith("small-batch kernels")

    # profiles check finds this image (the tag of the profile's inputs) and the flag passes there
    check = run_cli("profiles", "check", "--profile", "fork-cpu-test", "--wheelhouse", str(house), "--json",
                    "--profiles-dir", str(TEST_PROFILES), "--profiles-dir", str(fork.profiles))
    assert check.returncode == 0, check.stdout + check.stderr
    report = json.loads(check.stdout)
    assert report["where"] == f"image {result.image}"
    assert [f["status"] for f in report["findings"] if f["flag"] == f"--{FLAG}"] == ["ok"]
    typo = _profile(fork, "fork-typo", _git_source(fork), args={FLAG[:-1]: True})
    assert not flagcheck.check(typo, image=result.image).ok

    # a new commit is a new tag; a dirty checkout and a changed wheel are refused before a build
    (fork.repo / "python" / "sglang" / "fork_notes.py").write_text("NOTE = 1\n")
    with pytest.raises(ProfileError, match="uncommitted changes"):
        build(profile, engine=_untouchable(), wheelhouse=house)
    newer = commit_all(fork.repo, "one more")
    assert plan_build(_profile(fork, "fork-cpu-test", _git_source(fork, newer), args={FLAG: True}, wheels=pinned),
                      wheelhouse=house).tag != result.image
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    with pytest.raises(ProfileError, match="changed since it was pinned"):
        build(profile, engine=_untouchable(), wheelhouse=house)


def _untouchable():
    class Untouchable:
        def __getattr__(self, name: str):
            raise AssertionError(f"the engine was asked for {name} before the input was refused")
    return Untouchable()
