"""A real second local user for the tests of whose a file is (hooks, secret files): made with
`useradd` for the test and removed after it. Root only: a test that needs one skips, saying
why, where the suite does not run as root."""

from __future__ import annotations

import os
import pwd
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def other_user() -> Iterator[pwd.struct_passwd]:
    if os.geteuid() != 0:
        pytest.skip("needs root: makes a second local user with useradd to own the files under test")
    name = f"dt-other-{secrets.token_hex(3)}"
    made = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True
    )
    if made.returncode:
        pytest.skip(f"useradd could not make a second user here: {made.stderr.strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)
