"""The sglang recipe's declaration in its parts: the requirements (a fork's tree in place of the
sglang wheel, local wheels in place of their twins), the toolkit stage, where pip installs from,
the toolchain fingerprint, the hash inputs and the labels. Each part is read on its own here;
tests/test_recipe_sglang.py and tests/test_image_tag_and_render_are_pure.py check the whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deploytool.errors import UsageError
from deploytool.host import labels
from deploytool.image.local_wheels import LocalWheel
from deploytool.image.patches import series_for
from deploytool.image.recipes import sglang as recipe
from deploytool.image.runtime_source import ResolvedSource
from deploytool.profiles import Profile, ProfileStore

TEST_PROFILES = Path(__file__).parent / "profiles_sglang"
CARD = "rtx5090-qwen3.6-35b-a3b-nvfp4"
RELEASE = ResolvedSource(kind="wheel", version="0.5.23")
FORK = ResolvedSource(
    kind="git",
    version="0.5.23.dev1",
    repo="https://example.invalid/sglang.git",
    commit="a" * 40,
    subdir="python",
)


def _cpu() -> Profile:
    return ProfileStore([TEST_PROFILES]).get("sglang-cpu-test")


def _own(tmp_path: Path, name: str = "torch", version: str = "2.14.1") -> list[LocalWheel]:
    wheel = tmp_path / f"{name}-{version}-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(b"a wheel")
    return [LocalWheel(name=name, version=version, path=wheel, sha256="b" * 64)]


def test_a_release_installs_the_pinned_sglang_and_a_fork_its_tree_with_setuptools() -> None:
    card = ProfileStore().get(CARD)
    released = recipe.image_requirements(card, RELEASE, [])
    assert released == recipe.requirements(card)
    assert any(r.startswith("sglang==") for r in released)
    forked = recipe.image_requirements(card, FORK, [])
    assert not any(r.startswith("sglang==") for r in forked)
    assert forked[-1] == "setuptools" and forked.count("setuptools") == 1


def test_a_local_wheel_replaces_its_twin_in_the_requirements(tmp_path: Path) -> None:
    card = ProfileStore().get(CARD)
    reqs = recipe.image_requirements(card, RELEASE, _own(tmp_path))
    assert not any(r.startswith("torch==") for r in reqs)
    assert len(reqs) == len(recipe.requirements(card))  # replaced, not dropped


def test_the_toolkit_stage_only_for_a_wheels_base_and_only_with_a_lock() -> None:
    files: dict = {}
    assert recipe.toolkit_stage(ProfileStore().get(CARD), None, None, files) == (None, {})
    assert files == {}
    wheels_base = ProfileStore().get("rtx5090-qwen3.6-35b-a3b-nvfp4-wheels")
    with pytest.raises(UsageError, match="needs the wheel lock"):
        recipe.toolkit_stage(wheels_base, None, None, files)
    from deploytool.image import locks

    toolkit, fetched = recipe.toolkit_stage(wheels_base, locks.venv_lock(wheels_base), None, files)
    assert toolkit is not None and list(fetched) == ["cuda-wheels"]
    assert files == {toolkit.lock.path.name: toolkit.lock.path}


def test_without_lock_or_wheelhouse_pip_takes_the_index_but_local_wheels_still_count(tmp_path: Path) -> None:
    out = recipe.install_source(_cpu(), lock=None, own=[], source=RELEASE, wheelhouse=None)
    assert (out.pip_source, out.wheel_versions, out.lock_digest, out.files, out.fetched) == (
        "",
        {},
        None,
        {},
        {},
    )
    own = recipe.install_source(_cpu(), lock=None, own=_own(tmp_path), source=RELEASE, wheelhouse=None)
    assert own.wheel_versions == {"torch": "2.14.1"}


def test_a_wheelhouse_must_hold_the_pinned_sglang_unless_a_fork_stands_for_it(tmp_path: Path) -> None:
    profile = _cpu()
    house = tmp_path / "house"
    house.mkdir()
    (house / "numpy-2.0.0-cp312-none-any.whl").write_text("x")
    with pytest.raises(UsageError, match=f"no sglang {profile.image.runtime_version} wheel"):
        recipe.install_source(profile, lock=None, own=[], source=RELEASE, wheelhouse=house)
    assert recipe.install_source(
        profile, lock=None, own=[], source=FORK, wheelhouse=house
    ).wheel_versions == {"numpy": "2.0.0"}
    (house / f"sglang-{profile.image.runtime_version}-py3-none-any.whl").write_text("x")
    (house / "torch-2.9.1-cp312-cp312-linux_x86_64.whl").write_text("x")
    out = recipe.install_source(profile, lock=None, own=_own(tmp_path), source=RELEASE, wheelhouse=house)
    assert out.pip_source == "--no-index --find-links /tmp/deploytool/wheels"
    assert (
        "wheels/torch-2.9.1-cp312-cp312-linux_x86_64.whl" not in out.files
    )  # the local wheel's twin stays out
    assert (
        out.wheel_versions["sglang"] == profile.image.runtime_version
        and out.wheel_versions["torch"] == "2.14.1"
    )


def test_a_lock_is_installed_hash_checked_and_stands_for_its_wheels() -> None:
    from deploytool.image import locks

    card = ProfileStore().get("rtx5090-qwen3.6-35b-a3b-nvfp4-wheels")
    lock = locks.venv_lock(card)
    out = recipe.install_source(card, lock=lock, own=[], source=RELEASE, wheelhouse=None)
    assert out.pip_source.endswith("--require-hashes") and out.lock_digest == lock.digest
    assert out.files == {"requirements.lock": lock.path} and list(out.fetched) == ["wheels"]
    forked = recipe.install_source(card, lock=lock, own=[], source=FORK, wheelhouse=None)
    assert "sglang" not in forked.wheel_versions and forked.lock_digest != lock.digest
    installed = [line for line in forked.files["requirements.lock"].splitlines() if not line.startswith("#")]
    assert installed and not any(line.startswith("sglang==") for line in installed)


def test_the_fingerprint_of_a_release_names_what_compiled_and_keys_appear_only_when_they_say_something(
    tmp_path: Path,
) -> None:
    profile = _cpu()
    series = series_for(profile)
    plain = recipe.fingerprint(
        profile.image,
        mode="cpu",
        series=series,
        source=RELEASE,
        own=[],
        install=recipe.InstallSource(),
        toolkit=None,
    )
    assert plain["image_kind"] == "cpu" and plain["sglang"] == profile.image.runtime_version
    assert plain["torch"] == profile.image.torch_version
    assert len(json.loads(plain["patches"])) == len(series.names)
    assert not {"sglang_source", "local_wheels", "wheel_lock"} & set(plain)
    own = _own(tmp_path)
    richer = recipe.fingerprint(
        profile.image,
        mode="cpu",
        series=series,
        source=FORK,
        own=own,
        install=recipe.InstallSource(wheel_versions={"torch": "2.14.1"}, lock_digest="d"),
        toolkit=None,
    )
    assert richer["sglang_source"] == FORK.identity and richer["wheel_lock"] == "d"
    assert richer["torch"] == "2.14.1" and json.loads(richer["local_wheels"]) == {"torch": "b" * 64}


def test_hash_inputs_and_labels_name_a_fork_and_local_wheels_only_when_there_are_some(tmp_path: Path) -> None:
    series = series_for(_cpu())
    none = recipe.hash_inputs(
        ["a==1"], series=series, install=recipe.InstallSource(), toolkit=None, source=RELEASE, own=[]
    )
    assert set(none) == {"requirements", "patch_series"} and none["requirements"] == "a==1"
    assert recipe.image_labels(RELEASE, []) == {}
    own = _own(tmp_path)
    some = recipe.hash_inputs(
        ["a==1"],
        series=series,
        install=recipe.InstallSource(lock_digest="d"),
        toolkit=None,
        source=FORK,
        own=own,
    )
    assert some["sglang_source"] == FORK.identity and some["wheel_lock"] == "d" and "local_wheels" in some
    marked = recipe.image_labels(FORK, own)
    assert json.loads(marked[labels.IMAGE_RUNTIME_SOURCE])["commit"] == "a" * 40
    assert labels.IMAGE_LOCAL_WHEELS in marked


def test_template_vars_follow_the_install_source() -> None:
    profile = _cpu()
    series = series_for(profile)
    index = recipe.template_vars(
        profile,
        mode="cpu",
        install=recipe.InstallSource(),
        toolkit=None,
        source=RELEASE,
        series=series,
        own=[],
        wheelhouse=None,
    )
    assert (index["locked"], index["wheelhouse"], index["fork"], index["flatten"]) == (
        False,
        False,
        None,
        False,
    )
    assert index["patch_dir"] == f"patches/{profile.image.runtime_version}"
    locked = recipe.template_vars(
        profile,
        mode="cpu",
        install=recipe.InstallSource(lock_digest="d"),
        toolkit=None,
        source=FORK,
        series=series,
        own=[],
        wheelhouse=None,
    )
    assert locked["locked"] and locked["wheelhouse"] and locked["fork"]["pip_args"].startswith("--no-deps")
