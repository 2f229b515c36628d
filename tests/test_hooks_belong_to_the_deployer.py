"""Hooks run as the user who deploys, so a hook another user could change is code that user
runs as the deployer. Through `deploytool up --hooks`, with a real second local user: a hooks
folder or a hook that user owns, a hook that is a link into a folder others may write, and one
whose link leads to a file others may write are each refused before anything runs, naming the
path at fault, what is wrong with it and the command that fixes it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import run_cli
from other_user import other_user


@pytest.fixture
def stranger():
    with other_user() as user:
        yield user


def hook(folder: Path, name: str, marker: Path) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\ntouch {marker}\n")
    path.chmod(0o755)
    return path


def up(folder: Path):
    return run_cli("up", "--cpu", "--profile", "sim", "--skip-qualify", "--hooks", str(folder), timeout=120)


def refused(out, *, path: Path, wrong: str, fix: str, marker: Path) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    text = " ".join(out.stderr.split())  # rich wraps long lines
    assert str(path) in text and wrong in text and fix in text, out.stderr
    assert not marker.exists()  # nothing ran
    assert "serves" not in out.stdout


def test_a_hooks_folder_of_another_user_is_refused(tmp_path: Path, stranger):
    folder, marker = tmp_path / "hooks", tmp_path / "ran"
    folder.mkdir(mode=0o755)
    hook(folder, "post-cutover", marker)
    os.chown(folder, stranger.pw_uid, stranger.pw_gid)  # 0755: only the permission bits looked fine
    refused(up(folder), path=folder, wrong=f"owned by {stranger.pw_name} (uid {stranger.pw_uid})",
            fix=f"chown root {folder}", marker=marker)


def test_a_hook_of_another_user_is_refused(tmp_path: Path, stranger):
    folder, marker = tmp_path / "hooks", tmp_path / "ran"
    folder.mkdir(mode=0o755)
    path = hook(folder, "post-cutover", marker)
    os.chown(path, stranger.pw_uid, stranger.pw_gid)
    refused(up(folder), path=path, wrong=f"owned by {stranger.pw_name}", fix=f"chown root {path}", marker=marker)


def test_a_hook_that_links_into_a_folder_others_may_write_is_refused(tmp_path: Path):
    folder, shared, marker = tmp_path / "hooks", tmp_path / "shared", tmp_path / "ran"
    folder.mkdir(mode=0o755)
    shared.mkdir()
    shared.chmod(0o777)  # anyone may replace the file the link leads to
    target = hook(shared, "post-cutover", marker)
    (folder / "post-cutover").symlink_to(target)
    refused(up(folder), path=shared, wrong="writable by group and others (mode 0777)", fix=f"chmod go-w {shared}",
            marker=marker)


def test_a_hook_whose_link_leads_to_a_file_others_may_write_is_refused(tmp_path: Path):
    folder, elsewhere, marker = tmp_path / "hooks", tmp_path / "elsewhere", tmp_path / "ran"
    folder.mkdir(mode=0o755)
    elsewhere.mkdir(mode=0o755)
    target = hook(elsewhere, "hook.sh", marker)
    target.chmod(0o757)
    (folder / "pre-stop").symlink_to(target)
    refused(up(folder), path=target, wrong="writable by others (mode 0757)", fix=f"chmod go-w {target}",
            marker=marker)


def test_a_hooks_folder_in_a_folder_another_user_owns_is_refused(tmp_path: Path, stranger):
    home, marker = tmp_path / "home", tmp_path / "ran"
    folder = home / "hooks"
    folder.mkdir(parents=True, mode=0o755)
    hook(folder, "post-cutover", marker)
    os.chown(home, stranger.pw_uid, stranger.pw_gid)  # its owner may rename hooks/ and put theirs there
    refused(up(folder), path=home, wrong=f"owned by {stranger.pw_name}", fix=f"chown root {home}", marker=marker)
