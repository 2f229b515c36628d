"""Hooks run as the user who deploys, so a hook another user could change is code that user
runs as the deployer. Through `deploytool up --hooks`, with a real second local user: a hooks
folder or a hook that user owns, a hook that is a link into a folder others may write, and one
whose link leads to a file others may write, a link that leads nowhere, and a link through a
link that lies in a folder others may write or that user owns are each refused before anything
runs, naming the path at fault, what is wrong with it and the command that fixes it. A hook
that fails the check by the time it is due is not run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import free_port, run_cli
from lifecycle_helpers import PROFILES
from other_user import other_user

from deploytool.release.state import read_journal


@pytest.fixture
def stranger():
    with other_user() as user:
        yield user


def hook(folder: Path, name: str, marker: Path) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\ntouch {marker}\n")
    path.chmod(0o755)
    return path


def up(folder: Path, port: str | None = None, profiles: Path | None = None):
    """`up` with these hooks: of the shipped sim profile, or of t-good in `profiles` (a release
    that starts in a second, for the test whose `up` does start one)."""
    chosen = ["--profile", "t-good", "--profiles-dir", str(profiles)] if profiles else ["--profile", "sim"]
    return run_cli(
        "up",
        "--cpu",
        *chosen,
        "--skip-qualify",
        "--hooks",
        str(folder),
        "--port",
        port or str(free_port()),
        timeout=120,
    )


@pytest.fixture
def slot(docker_engine):
    """The `up`s here are refused before anything starts; one that is not (or the test of a
    hook that runs) leaves a release, taken down after the test."""
    yield
    run_cli("down", "--cpu", "--volumes", timeout=120)


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
    refused(
        up(folder),
        path=folder,
        wrong=f"owned by {stranger.pw_name} (uid {stranger.pw_uid})",
        fix=f"chown root {folder}",
        marker=marker,
    )


def test_a_hook_of_another_user_is_refused(tmp_path: Path, stranger):
    folder, marker = tmp_path / "hooks", tmp_path / "ran"
    folder.mkdir(mode=0o755)
    path = hook(folder, "post-cutover", marker)
    os.chown(path, stranger.pw_uid, stranger.pw_gid)
    refused(
        up(folder), path=path, wrong=f"owned by {stranger.pw_name}", fix=f"chown root {path}", marker=marker
    )


def test_a_hook_that_links_into_a_folder_others_may_write_is_refused(tmp_path: Path):
    folder, shared, marker = tmp_path / "hooks", tmp_path / "shared", tmp_path / "ran"
    folder.mkdir(mode=0o755)
    shared.mkdir()
    shared.chmod(0o777)  # anyone may replace the file the link leads to
    target = hook(shared, "post-cutover", marker)
    (folder / "post-cutover").symlink_to(target)
    refused(
        up(folder),
        path=shared,
        wrong="writable by group and others (mode 0777)",
        fix=f"chmod go-w {shared}",
        marker=marker,
    )


def test_a_hook_whose_link_leads_to_a_file_others_may_write_is_refused(tmp_path: Path):
    folder, elsewhere, marker = tmp_path / "hooks", tmp_path / "elsewhere", tmp_path / "ran"
    folder.mkdir(mode=0o755)
    elsewhere.mkdir(mode=0o755)
    target = hook(elsewhere, "hook.sh", marker)
    target.chmod(0o757)
    (folder / "pre-stop").symlink_to(target)
    refused(
        up(folder),
        path=target,
        wrong="writable by others (mode 0757)",
        fix=f"chmod go-w {target}",
        marker=marker,
    )


def test_a_hooks_folder_in_a_folder_another_user_owns_is_refused(tmp_path: Path, stranger):
    home, marker = tmp_path / "home", tmp_path / "ran"
    folder = home / "hooks"
    folder.mkdir(parents=True, mode=0o755)
    hook(folder, "post-cutover", marker)
    os.chown(home, stranger.pw_uid, stranger.pw_gid)  # its owner may rename hooks/ and put theirs there
    refused(
        up(folder), path=home, wrong=f"owned by {stranger.pw_name}", fix=f"chown root {home}", marker=marker
    )


def test_a_hook_link_that_leads_nowhere_is_refused(tmp_path: Path, slot):
    folder, shared, marker = tmp_path / "hooks", tmp_path / "shared", tmp_path / "ran"
    folder.mkdir(mode=0o755)
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp: the sticky bit keeps what is there, but anyone may create `late`
    (folder / "post-cutover").symlink_to(shared / "late")
    refused(
        up(folder),
        path=shared / "late",
        wrong="does not exist",
        fix=f"rm {folder / 'post-cutover'}",
        marker=marker,
    )


def test_a_hook_link_through_a_link_in_a_folder_others_may_write_is_refused(tmp_path: Path, slot):
    folder, shared, elsewhere, marker = (
        tmp_path / "hooks",
        tmp_path / "ww",
        tmp_path / "elsewhere",
        tmp_path / "ran",
    )
    for made in (folder, shared, elsewhere):
        made.mkdir(mode=0o755)
    shared.chmod(0o777)  # no sticky bit: anyone may point link2 at their own file
    (shared / "link2").symlink_to(hook(elsewhere, "hook.sh", marker))
    (folder / "post-cutover").symlink_to(shared / "link2")
    refused(
        up(folder),
        path=shared,
        wrong="writable by group and others (mode 0777)",
        fix=f"chmod go-w {shared}",
        marker=marker,
    )


def test_a_hook_link_through_a_link_another_user_owns_is_refused(tmp_path: Path, slot, stranger):
    folder, sticky, elsewhere = tmp_path / "hooks", tmp_path / "sticky", tmp_path / "elsewhere"
    marker = tmp_path / "ran"
    for made in (folder, sticky, elsewhere):
        made.mkdir(mode=0o755)
    sticky.chmod(0o1777)  # the sticky bit keeps link2 to its owner, who may still replace it
    link2 = sticky / "link2"
    link2.symlink_to(hook(elsewhere, "hook.sh", marker))
    os.lchown(link2, stranger.pw_uid, stranger.pw_gid)
    (folder / "post-cutover").symlink_to(link2)
    refused(
        up(folder), path=link2, wrong=f"owned by {stranger.pw_name}", fix=f"chown root {link2}", marker=marker
    )


def test_a_hook_is_checked_again_right_before_it_runs(tmp_path: Path, slot, stranger):
    """Fine when the deploy began, another user's by the time it runs: not run, and said so."""
    folder, shared, marker = tmp_path / "hooks", tmp_path / "shared", tmp_path / "ran"
    folder.mkdir(mode=0o755)
    shared.mkdir()
    shared.chmod(0o1777)
    late = hook(shared, "late", marker)  # root's own, 0755: passes when `up` begins
    (folder / "post-cutover").symlink_to(late)
    # between the check and the cut-over, `late` becomes another user's file that anyone may write
    # (the pre-stop hook does it here, in the window the deploy itself leaves)
    swap = (
        f"rm {late}; printf '#!/bin/sh\\ntouch {marker}\\n' > {late}; chmod 0777 {late}; "
        f"chown {stranger.pw_uid}:{stranger.pw_gid} {late}"
    )
    (folder / "pre-stop").write_text(f"#!/bin/sh\n{swap}\n")
    (folder / "pre-stop").chmod(0o755)
    port, profiles = str(free_port()), tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "t-good.yaml").write_text(PROFILES["t-good"])
    first = run_cli(
        "up",
        "--cpu",
        "--profile",
        "t-good",
        "--profiles-dir",
        str(profiles),
        "--skip-qualify",
        "--port",
        port,
        timeout=120,
    )
    assert first.returncode == 0, first.stdout + first.stderr
    out = up(folder, port, profiles)
    assert out.returncode == 0, out.stdout + out.stderr  # a post-cutover that fails only warns
    assert late.stat().st_uid == stranger.pw_uid  # the swap happened: pre-stop ran
    assert not marker.exists()  # the swapped-in file did not run
    text = " ".join(out.stderr.split())
    assert "post-cutover not run" in text and str(late) in text and f"owned by {stranger.pw_name}" in text, (
        text
    )
    assert f"chown root {late}" in text, text
    refusal = [e for e in read_journal() if e["event"] == "hook" and e["hook"] == "post-cutover"]
    assert len(refusal) == 1 and refusal[0]["exit_code"] is None and str(late) in refusal[0]["refused"]
