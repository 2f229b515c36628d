"""A profile's `{file: PATH}` secret is copied into the release's container, so the file must
be the one the deployer means: a regular file (a link judged by what it leads to), owned by
the invoking user, readable by no one else, one line, at most 4 KiB. Through `deploytool up`
(its plan, `--dry-run`, reads the secrets before anything is started), with a real second local
user: each refusal says what was wrong and how to fix it, and no refusal shows the content."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from conftest import free_port, run_cli
from other_user import other_user

CANARY = "canary-" + secrets.token_hex(8)
PRIVATE_KEY = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{CANARY}\n-----END OPENSSH PRIVATE KEY-----\n"


def plan_with_token_file(tmp_path: Path, token_file: Path):
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    (folder / "tok.yaml").write_text(
        f"name: tok\nextends: sim\nsecrets:\n  hf_token: {{file: {token_file}}}\n"
    )
    return run_cli(
        "up",
        "--cpu",
        "--profile",
        "tok",
        "--profiles-dir",
        str(folder),
        "--dry-run",
        "--port",
        str(free_port()),
        timeout=120,
    )


def secret_file(tmp_path: Path, text: str, mode: int = 0o600, name: str = "token") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def assert_refused(out, *, path: Path, wrong: str, fix: str) -> None:
    assert out.returncode == 2, out.stdout + out.stderr
    text = " ".join(out.stderr.split())
    assert f"comes from file {path}" in text and wrong in text and fix in text, out.stderr
    assert CANARY not in out.stdout + out.stderr


def test_a_multi_line_file_is_refused_and_one_line_is_taken(tmp_path: Path):
    path = secret_file(tmp_path, PRIVATE_KEY)
    assert_refused(
        plan_with_token_file(tmp_path, path),
        path=path,
        wrong="holds 3 lines",
        fix="write only the value in it, on one line",
    )
    for text in (CANARY, CANARY + "\n", CANARY + "\r\n", "  " + CANARY + "  \n"):
        out = plan_with_token_file(tmp_path, secret_file(tmp_path, text, name="one-line"))
        assert out.returncode == 0, out.stderr
        assert CANARY not in out.stdout + out.stderr


def test_a_file_others_may_read_is_refused(tmp_path: Path):
    path = secret_file(tmp_path, CANARY + "\n", mode=0o644)
    assert_refused(
        plan_with_token_file(tmp_path, path), path=path, wrong="(mode 0644)", fix=f"chmod 600 {path}"
    )


def test_a_file_over_the_size_cap_is_refused(tmp_path: Path):
    path = secret_file(tmp_path, CANARY + "x" * 5000 + "\n")
    assert_refused(
        plan_with_token_file(tmp_path, path),
        path=path,
        wrong="larger than 4096 bytes",
        fix="write only the value in it",
    )


def test_what_is_not_a_regular_file_is_refused(tmp_path: Path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)  # reading it would wait for a writer forever
    assert_refused(
        plan_with_token_file(tmp_path, fifo), path=fifo, wrong="is not a regular file", fix="name a file"
    )
    assert_refused(
        plan_with_token_file(tmp_path, tmp_path),
        path=tmp_path,
        wrong="is not a regular file",
        fix="name a file",
    )


def test_a_file_of_another_user_is_refused_and_so_is_a_link_to_it(tmp_path: Path):
    with other_user() as stranger:
        path = secret_file(tmp_path, CANARY + "\n")
        os.chown(path, stranger.pw_uid, stranger.pw_gid)  # 0600: the mode alone looks right
        wrong = f"is owned by {stranger.pw_name} (uid {stranger.pw_uid}), not by you (root)"
        assert_refused(plan_with_token_file(tmp_path, path), path=path, wrong=wrong, fix=f"chown root {path}")
        link = tmp_path / "link"
        link.symlink_to(path)
        assert_refused(
            plan_with_token_file(tmp_path, link),
            path=link,
            wrong=f"(a link to {path})",
            fix=f"chown root {path}",
        )


def test_a_link_to_a_file_others_may_read_is_refused(tmp_path: Path):
    target = secret_file(tmp_path, CANARY + "\n", mode=0o640, name="shared")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert_refused(
        plan_with_token_file(tmp_path, link),
        path=link,
        wrong=f"(mode 0640) (a link to {target})",
        fix=f"chmod 600 {target}",
    )
