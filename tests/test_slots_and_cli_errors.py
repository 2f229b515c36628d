"""Slot identity, instance separation, release URLs, and error text printed as text."""

from __future__ import annotations

import pytest
from conftest import run_cli

from deploytool.cli.slot_options import slot_from_options
from deploytool.errors import UsageError
from deploytool.host.releases import Release
from deploytool.release.state import journal, read_journal, slot_dir

A = "GPU-aaaaaaaa-1111-2222-3333-444455556666"
B = "GPU-bbbbbbbb-1111-2222-3333-444455556666"


def test_the_same_cards_are_the_same_slot_in_any_order():
    assert slot_from_options([B, A], False) == slot_from_options([A, B], False)
    assert slot_from_options([B, A], False).name == "gpu-aaaaaaaa-bbbbbbbb"


@pytest.mark.parametrize(
    "gpus, cpu, message",
    [
        ([A], True, "not both"),
        ([], False, "say which slot"),
        (["GPU-12"], False, "is not a GPU UUID"),
        ([A, A], False, "twice"),
    ],
)
def test_bad_slot_options(gpus, cpu, message):
    with pytest.raises(UsageError, match=message):
        slot_from_options(gpus, cpu)


def test_instances_keep_their_own_slot_state_and_journal(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("DEPLOYTOOL_INSTANCE", "team-a")
    a_dir = slot_dir("cpu")
    journal("cutover", slot="cpu", release=7)
    monkeypatch.setenv("DEPLOYTOOL_INSTANCE", "team-b")
    assert slot_dir("cpu") != a_dir
    assert read_journal("cpu") == []
    monkeypatch.setenv("DEPLOYTOOL_INSTANCE", "team-a")
    assert [e["release"] for e in read_journal("cpu")] == [7]


def release_on(host_ip: str) -> Release:
    return Release(
        "cpu", 1, "sim", "img", "id", "name", "running", "healthy", 31000, [], True, "", 0, host_ip
    )


@pytest.mark.parametrize(
    "host_ip, url",
    [
        ("127.0.0.1", "http://127.0.0.1:31000"),
        ("0.0.0.0", "http://127.0.0.1:31000"),
        ("192.0.2.2", "http://192.0.2.2:31000"),
        ("::", "http://[::1]:31000"),
    ],
)
def test_release_url_follows_the_published_address(host_ip: str, url: str):
    assert release_on(host_ip).url == url


def test_error_text_with_brackets_is_printed_as_text():
    out = run_cli("profiles", "show", "--profile", "[/models/sim]")
    assert out.returncode == 2
    assert "unknown profile '[/models/sim]'" in out.stderr and "Traceback" not in out.stderr
