"""Runtime sources and local wheels, on small repositories and files: what a profile may say,
what identifies the image (a commit, a tree's content, a wheel's sha256, never a location),
what is refused before anything is built, and what the build context and Dockerfile get.
No engine and no index: the real fork, its parser and its image are in test_fork_image.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import run_cli
from fork_repo import commit_all, git, profile_yaml, sha256, tiny_repo

from deploytool.errors import BuildError, ProfileError
from deploytool.host import labels
from deploytool.image import runtime_source
from deploytool.image.build import plan_build
from deploytool.profiles import ProfileStore

TEST_PROFILES = Path(__file__).parent / "profiles_sglang"
LOCKED = "rtx5090-qwen3.6-35b-a3b-nvfp4-wheels"  # a GPU profile with a wheel lock
UNLOCKED = "rtx5090-qwen3.6-35b-a3b-nvfp4"  # a GPU profile installing from the index


def _store(folder: Path, name: str, text: str) -> ProfileStore:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    return ProfileStore([TEST_PROFILES, folder])


def _profile(tmp_path: Path, source: dict, **kwargs):
    return _store(tmp_path / "profiles", "fork", profile_yaml("fork", source, **kwargs)).get("fork")


# -- what a profile may say -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "words"),
    [
        ({"kind": "git", "repo": "/srv/sglang", "commit": "main"}, "not a full commit hash"),
        ({"kind": "git", "repo": "/srv/sglang", "commit": "0123abc"}, "not a full commit hash"),
        (
            {"kind": "git", "repo": "https://user:token@example.invalid/sglang.git", "commit": "a" * 40},
            "credentials",
        ),
        ({"kind": "git", "repo": "/srv/sglang"}, "kind 'git' needs commit"),
        ({"kind": "path", "path": "/srv/sglang", "commit": "a" * 40}, "kind 'path' takes no commit"),
        ({"kind": "wheel", "repo": "/srv/sglang"}, "kind 'wheel' takes no repo"),
        ({"kind": "svn", "repo": "/srv/sglang"}, "image.source.kind"),
    ],
)
def test_a_source_the_fields_cannot_describe_is_refused_when_the_profile_loads(tmp_path: Path, source, words):
    with pytest.raises(ProfileError) as info:
        _profile(tmp_path, source)
    assert words in str(info.value) and "fork.yaml:" in str(info.value)


def test_a_commit_is_the_identity_so_a_new_commit_is_a_new_tag(tmp_path: Path):
    repo, first = tiny_repo(tmp_path)
    one = _profile(tmp_path, {"kind": "git", "repo": str(repo), "commit": first})
    plan = plan_build(one)
    assert (
        json.loads(plan.labels[labels.IMAGE_FINGERPRINT])["sglang_source"]
        == f"git {first} python/ (sglang 0.5.23)"
    )
    # the label says what the image holds; the checkout's path is this host's (the journal has it)
    assert json.loads(plan.labels[labels.IMAGE_RUNTIME_SOURCE]) == {
        "kind": "git",
        "commit": first,
        "subdir": "python",
        "version": "0.5.23",
    }
    assert plan.inputs.journal == {"runtime_repo": str(repo)}
    assert plan_build(one).tag == plan.tag  # the same commit, the same tag

    (repo / "python" / "sglang" / "fork.py").write_text("SMALL_BATCH = True\n")
    second = commit_all(repo, "a fork's change")
    assert (
        plan_build(_profile(tmp_path, {"kind": "git", "repo": str(repo), "commit": second})).tag != plan.tag
    )
    # a clone elsewhere at the same commit is the same image: a location is not an identity
    clone = tmp_path / "elsewhere"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    assert (
        plan_build(_profile(tmp_path, {"kind": "git", "repo": str(clone), "commit": first})).tag == plan.tag
    )
    # a URL: fetched once into deploytool's cache (here a file:// URL, no network)
    by_url = _profile(tmp_path, {"kind": "git", "repo": f"file://{repo}", "commit": first})
    assert plan_build(by_url).tag == plan.tag
    assert json.loads(plan_build(by_url).labels[labels.IMAGE_RUNTIME_SOURCE])["repo"] == f"file://{repo}"


def test_a_dirty_checkout_and_a_missing_commit_are_refused_before_anything_is_built(tmp_path: Path):
    repo, commit = tiny_repo(tmp_path)
    profile = _profile(tmp_path, {"kind": "git", "repo": str(repo), "commit": commit})
    (repo / "python" / "sglang" / "version.py").write_text('__version__ = "0.5.23"\nEDITED = 1\n')
    with pytest.raises(ProfileError) as info:
        plan_build(profile)
    message = str(info.value)
    assert (
        "uncommitted changes" in message and "python/sglang/version.py" in message and "kind: path" in message
    )
    git(repo, "checkout", "--", ".")
    (repo / "notes.txt").write_text("outside the package folder: not in the image\n")
    plan_build(profile)  # only what the image takes must be clean

    # the checkout moved on to another commit with changes of its own: they are against that
    # commit, not the named one, which git archive exports as committed
    (repo / "python" / "sglang" / "later.py").write_text("LATER = 1\n")
    later = commit_all(repo, "later work")
    (repo / "python" / "sglang" / "later.py").write_text("LATER = 2\n")
    plan_build(profile)  # not refused
    note = runtime_source.resolve(profile).note
    assert note.startswith(f"the checkout {repo} is at {later[:12]}, not {commit[:12]}: that does not matter")
    with pytest.raises(ProfileError, match="uncommitted changes"):  # at the named commit they count
        plan_build(_profile(tmp_path, {"kind": "git", "repo": str(repo), "commit": later}))
    git(repo, "checkout", "--", ".")

    with pytest.raises(ProfileError, match=f"has no commit {'b' * 40}"):
        plan_build(_profile(tmp_path, {"kind": "git", "repo": str(repo), "commit": "b" * 40}))
    with pytest.raises(ProfileError, match="is not a git repository"):
        plan_build(_profile(tmp_path, {"kind": "git", "repo": str(tmp_path), "commit": commit}))


def test_the_forks_version_comes_from_its_metadata_and_must_be_the_pinned_release(tmp_path: Path):
    repo, commit = tiny_repo(tmp_path, version="0.5.23.post1+sm120")
    source = runtime_source.resolve(_profile(tmp_path, {"kind": "git", "repo": str(repo), "commit": commit}))
    assert (source.version, source.subdir) == ("0.5.23.post1+sm120", "python")

    # a dynamic version read from the module pyproject.toml names (upstream's sglang/version.py)
    pyproject = (
        (repo / "python" / "pyproject.toml")
        .read_text()
        .replace('version = "0.5.23.post1+sm120"', 'dynamic = ["version"]')
    )
    (repo / "python" / "pyproject.toml").write_text(
        pyproject + '\n[tool.setuptools.dynamic]\nversion = {attr = "sglang.version.__version__"}\n'
    )
    dynamic = commit_all(repo, "dynamic version")
    assert (
        runtime_source.resolve(
            _profile(tmp_path, {"kind": "git", "repo": str(repo), "commit": dynamic})
        ).version
        == "0.5.23.post1+sm120"
    )

    old, old_commit = tiny_repo(tmp_path / "old", version="0.4.9")
    with pytest.raises(ProfileError) as info:
        plan_build(_profile(tmp_path, {"kind": "git", "repo": str(old), "commit": old_commit}))
    assert "sglang 0.4.9 (its own metadata)" in str(info.value) and "not in the version matrix" in str(
        info.value
    )

    (old / "python" / "pyproject.toml").write_text('[project]\nname = "vllm"\nversion = "1.0"\n')
    other = commit_all(old, "not sglang")
    with pytest.raises(ProfileError, match="no sglang package"):
        plan_build(_profile(tmp_path, {"kind": "git", "repo": str(old), "commit": other}))


def test_a_local_tree_is_identified_by_its_content(tmp_path: Path):
    repo, _ = tiny_repo(tmp_path)
    profile = _profile(tmp_path, {"kind": "path", "path": str(repo)})
    first = plan_build(profile)
    assert json.loads(first.labels[labels.IMAGE_FINGERPRINT])["sglang_source"].startswith("path sha256:")
    (repo / "python" / "sglang" / "fork.py").write_text(
        "SMALL_BATCH = True\n"
    )  # uncommitted: fine for a path
    edited = plan_build(profile)
    assert edited.tag != first.tag
    assert plan_build(profile).tag == edited.tag  # unchanged since: the same tag
    # what git ignores, and caches, are not the tree
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "python" / "sglang" / "run.log").write_text("noise\n")
    (repo / "python" / "sglang" / "__pycache__").mkdir()
    (repo / "python" / "sglang" / "__pycache__" / "fork.cpython-311.pyc").write_bytes(b"\0")
    assert plan_build(profile).tag == edited.tag
    # a copy without git somewhere else, with the same files (its caches skipped), is the same image
    copy = tmp_path / "copy"
    shutil.copytree(repo / "python", copy / "python", ignore=shutil.ignore_patterns("*.log"))
    assert (copy / "python" / "sglang" / "__pycache__").is_dir()
    moved = plan_build(_profile(tmp_path, {"kind": "path", "path": str(copy)}))
    assert moved.tag == edited.tag
    # and the same label: the tree's content, never its place on this host
    assert json.loads(moved.labels[labels.IMAGE_RUNTIME_SOURCE]) == json.loads(
        edited.labels[labels.IMAGE_RUNTIME_SOURCE]
    )
    assert str(tmp_path) not in moved.labels[labels.IMAGE_RUNTIME_SOURCE]
    assert moved.inputs.journal == {"runtime_path": str(copy)}


def test_render_names_the_fork_and_its_commit(tmp_path: Path):
    repo, commit = tiny_repo(tmp_path)
    _store(
        tmp_path / "profiles",
        "fork",
        profile_yaml("fork", {"kind": "git", "repo": str(repo), "commit": commit}),
    )
    out = run_cli(
        "render",
        "--cpu",
        "--profile",
        "fork",
        "--profiles-dir",
        str(TEST_PROFILES),
        "--profiles-dir",
        str(tmp_path / "profiles"),
    )
    assert out.returncode == 0, out.stderr
    profile = ProfileStore([TEST_PROFILES, tmp_path / "profiles"]).get("fork")
    assert f"image: {plan_build(profile).tag}" in out.stdout
    assert f"# runtime: sglang 0.5.23 from git {repo} at commit {commit} (python/)" in out.stdout


# -- local wheels -----------------------------------------------------------------------------------
def _fake_wheel(folder: Path, name: str, content: bytes = b"a local build") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(content)
    return path


def test_a_local_wheel_replaces_its_twin_in_the_lock_and_a_changed_one_is_refused(tmp_path: Path):
    from deploytool.image.recipes import sglang as recipe

    wheel = _fake_wheel(
        tmp_path / "wheels", "sglang_kernel-0.4.10+sm120-cp311-abi3-manylinux_2_34_x86_64.whl"
    )
    pin = [{"file": str(wheel), "sha256": sha256(wheel)}]
    profile = _store(
        tmp_path / "profiles",
        "kernels",
        profile_yaml("kernels", {"kind": "wheel"}, extends=LOCKED, wheels=pin),
    ).get("kernels")
    inputs = recipe.declare(profile, wheelhouse=None)
    lock = inputs.files["requirements.lock"]
    assert isinstance(lock, str)
    assert f"sglang-kernel==0.4.10+sm120 --hash=sha256:{sha256(wheel)}  # {wheel.name}" in lock
    assert "\nsglang-kernel==0.4.10 --hash" not in lock  # the index's twin is gone from the image's lock
    assert "sglang==0.5.23 --hash" in lock
    assert inputs.fingerprint["sglang_kernel"] == "0.4.10+sm120"
    assert json.loads(inputs.fingerprint["local_wheels"]) == {"sglang-kernel": sha256(wheel)}
    assert json.loads(inputs.labels[labels.IMAGE_LOCAL_WHEELS]) == [
        {"name": "sglang-kernel", "version": "0.4.10+sm120", "file": wheel.name, "sha256": sha256(wheel)}
    ]
    plan = plan_build(profile)
    assert "COPY local-wheels/ /tmp/deploytool/local-wheels/" in plan.dockerfile
    assert "--find-links /tmp/deploytool/local-wheels --require-hashes" in plan.dockerfile
    assert plan.tag != plan_build(ProfileStore().get(LOCKED)).tag

    wheel.write_bytes(b"rebuilt since it was pinned")
    with pytest.raises(ProfileError) as info:
        plan_build(profile)
    assert f"has sha256 {sha256(wheel)}, the profile pins {pin[0]['sha256']}" in str(info.value)


def test_a_local_wheel_for_another_python_or_machine_is_refused(tmp_path: Path):
    for name, words in [
        ("flashinfer_python-0.7.2-cp312-cp312-manylinux_2_34_x86_64.whl", "Python is 3.11"),
        ("flashinfer_python-0.7.2-cp311-cp311-macosx_14_0_arm64.whl", "the image is linux"),
        ("not-a-wheel.whl", "not a wheel file name"),
    ]:
        wheel = _fake_wheel(tmp_path / "w", name)
        profile = _store(
            tmp_path / "profiles",
            "kernels",
            profile_yaml(
                "kernels",
                {"kind": "wheel"},
                extends=LOCKED,
                wheels=[{"file": str(wheel), "sha256": sha256(wheel)}],
            ),
        ).get("kernels")
        with pytest.raises(ProfileError, match=words):
            plan_build(profile)


def test_an_unlocked_image_installs_the_local_file_and_a_fork_after_the_rest(tmp_path: Path):
    repo, commit = tiny_repo(tmp_path)
    wheel = _fake_wheel(tmp_path / "wheels", "flashinfer_python-0.7.2+sm120-py3-none-any.whl")
    profile = _store(
        tmp_path / "profiles",
        "fork-gpu",
        profile_yaml(
            "fork-gpu",
            {"kind": "git", "repo": str(repo), "commit": commit},
            extends=UNLOCKED,
            wheels=[{"file": str(wheel), "sha256": sha256(wheel)}],
        ),
    ).get("fork-gpu")
    plan = plan_build(profile)
    reqs = plan.inputs.files["requirements.txt"].split()
    assert f"/tmp/deploytool/local-wheels/{wheel.name}" in reqs and "setuptools" in reqs
    assert not any(r.startswith(("sglang==", "flashinfer-python==")) for r in reqs)
    # the fork with its dependencies resolved from the index, after the pinned packages
    install = plan.dockerfile.index("-r /tmp/deploytool/requirements.txt")
    fork = plan.dockerfile.index(
        "pip install --no-cache-dir --no-build-isolation /tmp/deploytool/runtime-src/python"
    )
    assert install < fork
    assert f"ADD runtime-src/git-{commit}-python.tar /tmp/deploytool/runtime-src/" in plan.dockerfile

    # locked: the lock without sglang (the fork is it), the fork without dependencies and index
    locked = _store(
        tmp_path / "profiles",
        "fork-locked",
        profile_yaml("fork-locked", {"kind": "git", "repo": str(repo), "commit": commit}, extends=LOCKED),
    ).get("fork-locked")
    plan = plan_build(locked)
    assert "\nsglang==" not in plan.inputs.files["requirements.lock"]
    assert (
        "--no-build-isolation --no-deps --no-index --find-links /tmp/deploytool/wheels "
        "/tmp/deploytool/runtime-src/python"
    ) in plan.dockerfile


def test_a_forks_tree_is_staged_from_git_archive(tmp_path: Path):
    import tarfile

    repo, commit = tiny_repo(tmp_path)
    source = runtime_source.resolve(_profile(tmp_path, {"kind": "git", "repo": str(repo), "commit": commit}))
    with tarfile.open(runtime_source.export_tar(source)) as archive:
        names = sorted(archive.getnames())
    assert "python/pyproject.toml" in names and "python/sglang/version.py" in names
    assert not any(n.startswith("README") for n in names)  # only the package folder
    unpacked = runtime_source.unpacked(source)
    assert (unpacked / "sglang" / "version.py").read_text() == '__version__ = "0.5.23"\n'


def test_a_local_trees_exports_replace_each_other_in_the_cache(tmp_path: Path):
    repo, _ = tiny_repo(tmp_path)
    profile = _profile(tmp_path, {"kind": "path", "path": str(repo)})
    first = runtime_source.resolve(profile)
    tree = runtime_source.unpacked(first)
    assert not (tree / "sglang" / "fork.py").exists()
    (repo / "python" / "sglang" / "fork.py").write_text("SMALL_BATCH = True\n")
    second = runtime_source.resolve(profile)
    assert second.key != first.key and runtime_source.unpacked(second) == tree
    assert (tree / "sglang" / "fork.py").read_text() == "SMALL_BATCH = True\n"
    assert [p.name for p in runtime_source.export_tar(second).parent.glob("*.tar")] == [f"{second.key}.tar"]
    # a tree that changes after its tag was computed is not staged under that tag
    (repo / "python" / "sglang" / "fork.py").write_text("SMALL_BATCH = False\n")
    with pytest.raises(BuildError, match="changed while the image was being planned"):
        runtime_source.export_tar(second)


def test_patches_import_refuses_a_url_with_credentials_before_fetching(tmp_path: Path):
    """The URL would land in the mirror's git config, the series header and memory.yaml."""
    import hashlib
    import secrets

    from deploytool.release.state import cache_dir

    token = secrets.token_hex(8)
    url = f"https://fork:{token}@127.0.0.1:9/sglang.git"
    out = run_cli(
        "patches",
        "import",
        "--from",
        url,
        "--base",
        "v0.5.23",
        "--head",
        "main",
        "--out",
        str(tmp_path / "series"),
        "--json",
    )
    assert out.returncode == 2, out.stdout + out.stderr
    error = json.loads(out.stdout)["error"]
    assert (
        error["kind"] == "UsageError"
        and error["flag"] == "--from"
        and error["message"].startswith("--from: the repository URL carries credentials")
    )
    assert token not in out.stdout + out.stderr
    assert not (cache_dir("git") / hashlib.sha256(url.encode()).hexdigest()[:16]).exists()
    assert not (tmp_path / "series").exists()


def test_patches_import_from_an_unreachable_url_says_what_to_check(tmp_path: Path):
    # one fixed URL: its (empty) mirror in the shared cache is the same in every run
    out = run_cli(
        "patches",
        "import",
        "--from",
        "file:///nonexistent/deploytool-test/no-such-repo.git",
        "--base",
        "v0.5.23",
        "--head",
        "main",
        "--out",
        str(tmp_path / "series"),
        "--json",
    )
    assert out.returncode != 0, out.stdout + out.stderr
    error = json.loads(out.stdout)["error"]
    assert error["kind"] == "CouldNotRun" and error["message"].startswith("could not fetch file://")
    assert "check the URL" in error["hint"]


def test_a_series_of_its_own_is_part_of_the_wheel_sources_identity(tmp_path: Path):
    """`profiles check` matches a built image by its toolchain label's sglang_source: a wheel
    profile's own series (its content, not its folder) must be in it, or an image built with
    another series would pass for the profile's."""
    from deploytool.image import flagcheck

    series = tmp_path / "my-series"
    series.mkdir()
    (series / "0001-a.patch").write_text("--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -1 +1 @@\n-a\n+b\n")
    (series / "series").write_text("0001-a.patch\n")
    profile = _profile(tmp_path, {"kind": "wheel", "series": str(series)})
    first = runtime_source.resolve(profile).identity
    assert first.startswith("wheel series sha256:") and str(series) not in first
    assert json.loads(plan_build(profile).labels[labels.IMAGE_FINGERPRINT])["sglang_source"] == first
    assert flagcheck._source_identity(profile) == first
    label = json.loads(plan_build(profile).labels[labels.IMAGE_RUNTIME_SOURCE])
    assert label == {"kind": "wheel", "version": "0.5.23", "series_sha256": first.rsplit(":", 1)[1]}
    moved = tmp_path / "elsewhere"
    shutil.copytree(series, moved)
    assert (
        runtime_source.resolve(_profile(tmp_path, {"kind": "wheel", "series": str(moved)})).identity == first
    )
    (series / "0001-a.patch").write_text("--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -1 +1 @@\n-a\n+c\n")
    assert flagcheck._source_identity(profile) != first
    # the release with its shipped series is plain "wheel", as its images have always said
    assert flagcheck._source_identity(_profile(tmp_path, {"kind": "wheel"})) == "wheel"
