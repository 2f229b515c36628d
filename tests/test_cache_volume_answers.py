"""What the JIT cache volume's reader makes of the script's answer: the fingerprint, file count
and size when they are there, and a message naming the volume (not a traceback) when the answer
is empty or cut short, as a container's output can be on a loaded engine."""

from __future__ import annotations

import pytest

from deploytool.errors import DeployError
from deploytool.host.slots import Slot
from deploytool.release.cache import _wipe, decide, read_state


class AnsweringEngine:
    """An engine whose cache volume exists and whose throwaway containers print `answer`."""

    def __init__(self, answer: str) -> None:
        self.answer = answer

    def volume_exists(self, name: str) -> bool:
        return True

    def run_throwaway(self, image: str, script: str, **_: object) -> str:
        return self.answer


def test_a_whole_answer_gives_the_fingerprint_the_file_count_and_the_size() -> None:
    state = read_state(AnsweringEngine('{"torch": "2.11.0"}\n\n12\n4096\n'), "img", Slot())
    assert (state.fingerprint, state.files, state.bytes) == ({"torch": "2.11.0"}, 12, 4096)
    assert _wipe(AnsweringEngine("12\n"), "img", Slot(), None) == 12


def test_an_empty_fingerprint_file_reads_as_unreadable_so_the_cache_is_wiped() -> None:
    # What a fingerprint write that failed half way (a full disk) leaves: `cat` prints nothing.
    state = read_state(AnsweringEngine("\n3\n100\n"), "img", Slot())
    assert (state.fingerprint, state.files, state.bytes) == ({"unreadable": ""}, 3, 100)
    assert decide(state, {"torch": "2.11.0"}).action == "wiped"


@pytest.mark.parametrize("answer", ["", "\n", "null\n", "null\n\n7\n"])
def test_an_empty_or_cut_answer_is_an_error_naming_the_volume(answer: str) -> None:
    with pytest.raises(DeployError, match=f"could not read the JIT cache volume {Slot().cache_volume()}"):
        read_state(AnsweringEngine(answer), "img", Slot())


@pytest.mark.parametrize("answer", ["", "\n", "find: /cache: busy\n"])
def test_a_wipe_without_its_count_is_an_error_naming_the_volume(answer: str) -> None:
    with pytest.raises(DeployError, match=f"could not wipe the JIT cache volume {Slot().cache_volume()}"):
        _wipe(AnsweringEngine(answer), "img", Slot(), None)


class ImageEngine(AnsweringEngine):
    """The same, with an image on the engine (its id and labels) and a count of the containers."""

    def __init__(self, answer: str) -> None:
        super().__init__(answer)
        self.containers = 0

    def image(self, reference: str) -> object:
        return type("Image", (), {"id": f"sha256:{reference}", "labels": {}})()

    def image_labels(self, reference: str) -> dict[str, str]:
        return {}

    def run_throwaway(self, image: str, script: str, **_: object) -> str:
        self.containers += 1
        return self.answer


def test_one_container_reads_the_toolchain_and_the_volume_and_the_toolchain_is_read_once_an_image() -> None:
    from deploytool.release.cache import _BETWEEN, state_and_expected

    engine = ImageEngine(f'{{"nvcc": "13.0"}}\n{_BETWEEN}\n{{"nvcc": "12.9"}}\n\n2\n64\n')
    state, expected = state_and_expected(engine, "answers-once", Slot())
    assert (state.fingerprint, state.files, state.bytes) == ({"nvcc": "12.9"}, 2, 64)
    assert expected == {"nvcc": "13.0", "gpu_arch": "cpu"} and engine.containers == 1
    # the same image again (the start after the plan): its files are the same, only the volume is read
    engine.answer = '{"nvcc": "13.0"}\n\n3\n96\n'
    state, expected = state_and_expected(engine, "answers-once", Slot())
    assert (state.files, expected["nvcc"], engine.containers) == (3, "13.0", 2)


@pytest.mark.parametrize("answer", ["", '{"nvcc": "13.0"}\n', '{"nvcc": "13.0"}\nnull\n\n7\n'])
def test_a_combined_answer_without_the_volume_s_part_is_an_error_naming_the_volume(answer: str) -> None:
    from deploytool.release.cache import state_and_expected

    with pytest.raises(DeployError, match=f"could not read the JIT cache volume {Slot().cache_volume()}"):
        state_and_expected(ImageEngine(answer), f"cut-{len(answer)}", Slot())


class NewVolumeEngine(ImageEngine):
    """An engine with a content-addressed image and no cache volume until one is created; its
    throwaway containers answer the toolchain read and the wipe's count."""

    def __init__(self, image_id: str) -> None:
        super().__init__("")
        self.image_id, self.volumes, self.scripts = image_id, set(), []

    def image(self, reference: str) -> object:
        return type("Image", (), {"id": self.image_id, "labels": {}})()

    def volume_exists(self, name: str) -> bool:
        return name in self.volumes

    def create_volume(self, name: str, labels: dict[str, str]) -> None:
        self.volumes.add(name)

    def run_throwaway(self, image: str, script: str, **_: object) -> str:
        self.containers += 1
        self.scripts.append(script)
        return '{"nvcc": "13.0"}\n' if "toolchain.json" in script else "0\n"


def test_a_new_volume_is_created_without_a_read_and_the_toolchain_is_read_once_an_image_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import secrets

    from deploytool.release import cache

    image_id = f"sha256:{secrets.token_hex(32)}"  # an image no other test has
    engine = NewVolumeEngine(image_id)
    decision = cache.prepare_slot_cache(engine, "img", Slot())
    # the toolchain read, then the wipe that records the fingerprint: no container to read a
    # volume made a moment ago
    assert decision.action == "created" and engine.containers == 2
    assert "toolchain.json" in engine.scripts[0] and '"nvcc": "13.0"' in engine.scripts[1]
    # the next deploytool (a process of its own: nothing in memory) finds the record on disk
    monkeypatch.setattr(cache, "_TOOLCHAINS", {})
    again = NewVolumeEngine(image_id)
    assert cache.prepare_slot_cache(again, "img", Slot()).action == "created"
    assert again.containers == 1 and "toolchain.json" not in again.scripts[0]
    # a record cut short on disk is read from the image again, and written whole
    record = cache._record_file(image_id)
    assert record is not None and record.is_file()
    try:
        record.write_text('{"nvcc": ')
        monkeypatch.setattr(cache, "_TOOLCHAINS", {})
        third = NewVolumeEngine(image_id)
        assert cache.installed_toolchain(third, "img") == {"nvcc": "13.0"} and third.containers == 1
        assert record.read_text() == '{"nvcc": "13.0"}'
    finally:
        record.unlink()


def test_an_image_without_a_content_digest_is_never_remembered_on_disk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from deploytool.release import cache

    engine = NewVolumeEngine("local-image")  # a name, not a digest: other files may take it later
    assert cache.installed_toolchain(engine, "img") == {"nvcc": "13.0"}
    assert not list(cache.cache_dir("toolchains").rglob("*local-image*"))
    monkeypatch.setattr(cache, "_TOOLCHAINS", {})
    assert cache.installed_toolchain(engine, "img") == {"nvcc": "13.0"} and engine.containers == 2


def test_a_record_that_cannot_be_renamed_into_place_leaves_no_partial_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    import secrets
    from pathlib import Path

    from deploytool.release import cache

    monkeypatch.setenv("DEPLOYTOOL_HOME", str(tmp_path / "home"))

    def refused(self, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", refused)
    engine = NewVolumeEngine(f"sha256:{secrets.token_hex(32)}")
    assert cache.installed_toolchain(engine, "img") == {"nvcc": "13.0"}
    assert [p for p in (tmp_path / "home" / "cache").rglob("*") if p.is_file()] == []


def test_a_cache_folder_that_cannot_keep_the_record_costs_a_read_not_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    import secrets

    from deploytool.release import cache

    # a state folder of its own, whose cache has a file where toolchains/ would be: no folder
    # can be made there, nor a record written
    monkeypatch.setenv("DEPLOYTOOL_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "cache").mkdir(parents=True)
    (tmp_path / "home" / "cache" / "toolchains").write_text("")
    engine = NewVolumeEngine(f"sha256:{secrets.token_hex(32)}")
    assert cache.installed_toolchain(engine, "img") == {"nvcc": "13.0"}
    monkeypatch.setattr(cache, "_TOOLCHAINS", {})
    assert cache.installed_toolchain(engine, "img") == {"nvcc": "13.0"} and engine.containers == 2
    assert sorted(p.name for p in (tmp_path / "home" / "cache").iterdir()) == ["toolchains"]
