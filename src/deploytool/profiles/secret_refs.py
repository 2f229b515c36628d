"""Where a profile's secrets live on the host, and how their values are read: an environment
variable or a file of the invoking user's, checked on the open file, the value held for
scrubbing from every output from the moment it is read. A profile names them (`secrets:`,
`server.api_key`); a release reads them when it starts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import UsageError
from ..files import user_name
from ..redaction import hold


class SecretError(UsageError):
    """A secret the profile names cannot be read on this host."""


class SecretRef(BaseModel):
    """Where a secret lives on the host: an environment variable or a file, exactly one."""

    model_config = ConfigDict(extra="forbid")
    env: str | None = Field(default=None, description="a variable of the shell that runs deploytool")
    file: str | None = Field(
        default=None,
        description="a regular file of yours holding the value on one line, "
        "mode 0600, at most 4 KiB (else refused)",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env: NAME or file: PATH")
        return self

    def describe(self) -> str:
        return f"host env {self.env}" if self.env else f"host file {self.file}"

    def reference(self) -> dict[str, str]:
        """What a record may keep: the place, never the value."""
        return {"env": self.env} if self.env else {"file": str(self.file)}

    def resolve(self, env: Mapping[str, str] | None = None, *, what: str, private: bool = True) -> str:
        """The value. A file must be the invoking user's and readable by no one else unless
        `private` is off (a client's key file mounted from a Kubernetes Secret is root's, 0440)."""
        source: Mapping[str, str] = os.environ if env is None else env
        if self.env:
            value = source.get(self.env, "")
            if not value.strip():
                raise SecretError(
                    f"{what} comes from environment variable {self.env}, which is not set or empty",
                    hint=f"export {self.env}=... in the shell that runs deploytool, or name a file "
                    "instead ({file: PATH}, mode 0600)",
                )
            hold(value)  # from now on, every output of this process scrubs it
            return value.strip()
        value = read_secret_file(Path(str(self.file)).expanduser(), what=what, private=private)
        hold(value)
        return value


# An HF token is 37 characters, an API key a few dozen, a signed bearer token (a JWT) a kilobyte
# or two: 4 KiB holds any of them, and refuses a certificate bundle, a key pair or a log file
# named by mistake before any of it reaches a container.
SECRET_FILE_MAX_BYTES = 4096


def read_secret_file(path: Path, *, what: str, private: bool = True) -> str:
    """The value of a secret file, checked on the open file itself (so a swap between the check
    and the read changes nothing): a regular file (a link is judged by the file it leads to),
    with `private` owned by the invoking user and readable by no one else, one line (a final line
    break allowed), at most SECRET_FILE_MAX_BYTES. Every refusal says what was wrong and how to
    fix it; none shows the content."""
    import stat

    def refuse(problem: str, fix: str) -> SecretError:
        return SecretError(f"{what} comes from file {path}, which {problem}", hint=fix)

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO named here must not block the read
    except OSError as exc:
        raise refuse(
            f"cannot be read ({exc.strerror})",
            "create it (mode 0600) with the value on one line, or use {env: NAME}",
        ) from None
    info = os.fstat(fd)
    real = os.path.realpath(path)
    shown = f" (a link to {real})" if real != os.path.abspath(path) else ""
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise refuse(f"is not a regular file{shown}", "name a file that holds the value on one line")
    with os.fdopen(fd, "rb") as handle:
        if private and info.st_uid != os.geteuid():
            raise refuse(
                f"is owned by {user_name(info.st_uid)} (uid {info.st_uid}), not by you "
                f"({user_name(os.geteuid())}){shown}: its owner can change what the release gets",
                f"chown {user_name(os.geteuid())} {real}, or copy the value into a file of your own "
                "(mode 0600) and name that",
            )
        if private and info.st_mode & 0o077:
            raise refuse(
                f"is readable or writable by others than you (mode {info.st_mode & 0o7777:04o}){shown}",
                f"chmod 600 {real}",
            )
        data = handle.read(SECRET_FILE_MAX_BYTES + 1)
    if len(data) > SECRET_FILE_MAX_BYTES:
        raise refuse(
            f"is larger than {SECRET_FILE_MAX_BYTES} bytes: a secret file holds one value, a token or a key",
            "write only the value in it, on one line",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise refuse("is not UTF-8 text", "write the value in it as text, on one line") from None
    body = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
    lines = body.splitlines()
    if len(lines) > 1:
        raise refuse(
            f"holds {len(lines)} lines: a secret file holds one value on one line",
            "write only the value in it, on one line (a final line break is fine)",
        )
    value = body.strip()
    if not value:
        raise refuse("is empty", "write the value on one line")
    return value
