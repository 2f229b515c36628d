"""The Docker engine, as deploytool uses it: the Docker SDK for objects (containers, images,
volumes, builds) and the real `docker compose` plugin for compose projects.

This is the one door to Docker: no other module imports the SDK or runs `docker`, so an
engine's error always arrives as a DeploytoolError with a message, never as docker.errors.
Callers get typed `Release` objects, not the SDK's dicts.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import os
import secrets
import shutil
import signal
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors

from ..errors import BuildError, DeployError, EngineUnavailable
from . import labels
from .engine_api import HOW_TO_GET_AN_ENGINE
from .releases import Release, release_from_inspect

# Where a throwaway container's script leaves its two streams (see Engine.run_throwaway).
_THROWAWAY_OUT = "/tmp/.deploytool-throwaway.out"  # nosec B108: a path inside a throwaway container, not the host's /tmp
_THROWAWAY_ERR = "/tmp/.deploytool-throwaway.err"  # nosec B108: a path inside a throwaway container, not the host's /tmp
# The SDK's filters argument, as its list() methods type it (a label filter takes a list).
_Filters = dict[str, str | list[str] | bool]


def _file_in(container: Any, path: str) -> str | None:
    """A text file from a container's filesystem (running or exited); None when it is not there."""
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            handle = tar.extractfile(member) if member is not None else None
            return handle.read().decode("utf-8", "replace") if handle is not None else None
    except (docker.errors.NotFound, tarfile.TarError):  # not written, or not a file: the log has why
        return None


@contextlib.contextmanager
def _interruptions_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM (both raise in the main thread) held back for one engine call that
    makes or removes a container, and delivered when it returns. Raised in the middle of the
    call, the engine would have made the container and this process no handle to remove it by,
    or the removal would be cut short: a container left holding the slot's cache volume.

    The handlers are swapped for one that takes note, not the signals blocked: blocking covers
    only the calling thread, and any other thread of the process (the HTTP client's, a thread
    pool's) may receive the signal and have the main thread raise all the same. The client's
    timeout bounds the wait. Called outside the main thread, nothing is held: there, no signal
    is raised."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    before = {number: signal.signal(number, lambda number, _frame: noted.append(number)) for number in held}
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
        if noted:  # the handler it would have met: KeyboardInterrupt, deploytool's Terminated, or the default
            signal.raise_signal(noted[0])


def _engine_errors_as_messages(cls: type) -> type:
    """Wrap every public method so that an engine error the method did not handle itself
    becomes a DeploytoolError with a message: docker.errors never leave this module."""

    def wrap(method: Any) -> Any:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            except docker.errors.APIError as exc:
                raise DeployError(
                    f"the Docker engine refused: {exc.explanation or exc}", hint="see `deploytool doctor`"
                ) from None
            except docker.errors.DockerException as exc:
                raise EngineUnavailable(
                    f"the Docker engine failed: {_short(exc)}", hint=HOW_TO_GET_AN_ENGINE
                ) from None

        return call

    for name, member in list(vars(cls).items()):
        if callable(member) and not name.startswith("_") and not inspect.isgeneratorfunction(member):
            setattr(cls, name, wrap(member))
    return cls


@_engine_errors_as_messages
class Engine:
    def __init__(self, client: docker.DockerClient | None = None):
        if client is None:
            try:
                client = docker.from_env(timeout=120)
                client.ping()
            except docker.errors.DockerException as exc:
                raise EngineUnavailable(
                    f"no Docker engine is reachable ({_short(exc)})",
                    hint=HOW_TO_GET_AN_ENGINE,
                    reason=_short(exc),
                ) from None
        self.client = client

    @classmethod
    def optional(cls) -> Engine | None:
        """The engine when one answers, else None: for checks that can run without one."""
        try:
            return cls()
        except EngineUnavailable:
            return None

    @cached_property
    def server_version(self) -> str:
        return str(self.client.version().get("Version", "unknown"))

    # -- compose ---------------------------------------------------------------------------
    def compose(
        self,
        project: str,
        compose_file: Path,
        *args: str,
        check: bool = True,
        timeout: float = 600,
        secret_env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """`secret_env`: values compose's `secrets: {environment: VAR}` read (deploytool.release.secrets);
        they live in this one subprocess's environment only."""
        cmd = [_docker_cli(), "compose", "-p", project, "-f", str(compose_file), *args]
        env = {**os.environ, **secret_env} if secret_env else None
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            raise DeployError(f"`{' '.join(cmd)}` did not finish within {timeout:g} s") from None
        if check and proc.returncode != 0:
            raise DeployError(
                f"`docker compose {' '.join(args)}` failed for project {project}:\n"
                + _tail(proc.stderr or proc.stdout, 15)
            )
        return proc

    def compose_config(self, source: Path | str, *, project: str | None = None) -> str:
        return compose_config(source, project=project)

    def compose_version(self) -> str:
        version = compose_plugin_version()
        if version is None:
            raise EngineUnavailable("the docker compose v2 plugin is missing", hint=HOW_TO_GET_AN_ENGINE)
        return version

    # -- releases --------------------------------------------------------------------------
    def releases(self, slot: str | None = None) -> list[Release]:
        filters: _Filters = {
            "label": [f"{labels.MANAGED}=true", f"{labels.INSTANCE}={labels.instance()}"]
            + ([f"{labels.SLOT}={slot}"] if slot else [])
        }
        found = [self._release(c) for c in self.client.containers.list(all=True, filters=filters)]
        return sorted(found, key=lambda r: (r.slot, r.release))

    def release(self, slot: str, number: int) -> Release | None:
        return next((r for r in self.releases(slot) if r.release == number), None)

    def refresh(self, release: Release) -> Release:
        try:
            return self._release(self.client.containers.get(release.container_id))
        except docker.errors.NotFound:
            raise DeployError(f"container {release.container_name} no longer exists") from None

    def _release(self, container: Any) -> Release:
        return release_from_inspect(container.attrs)

    def start(self, release: Release) -> None:
        self.client.containers.get(release.container_id).start()

    def stop(self, release: Release, timeout: int = 30) -> None:
        self.client.containers.get(release.container_id).stop(timeout=timeout)

    def remove(self, release: Release) -> None:
        self.client.containers.get(release.container_id).remove(force=True)

    def slot_networks(self, slot: str) -> list[str]:
        """The slot's networks of this instance, found by label."""
        filters: _Filters = {"label": [f"{labels.INSTANCE}={labels.instance()}", f"{labels.SLOT}={slot}"]}
        return sorted(n.name for n in self.client.networks.list(filters=filters) if n.name)

    def remove_networks(self, slot: str) -> list[str]:
        """Remove the slot's networks of this instance (by label) that no container uses; their names."""
        filters: _Filters = {"label": [f"{labels.INSTANCE}={labels.instance()}", f"{labels.SLOT}={slot}"]}
        removed = []
        for network in self.client.networks.list(filters=filters):
            network.reload()
            if not network.attrs.get("Containers"):
                network.remove()
                removed.append(network.name or network.short_id)
        return removed

    def remove_volume(self, name: str) -> None:
        """Remove a volume. A throwaway container of this instance that still mounts it and has
        stopped (or never started) is one a deploytool process left when it was killed before
        removing it: it would hold the volume for ever, so it goes first. Anything else that
        still uses the volume is named in the refusal, and nothing is removed."""
        leftovers: _Filters = {"volume": name, "label": f"{labels.THROWAWAY}={labels.instance()}"}
        for container in self.client.containers.list(all=True, filters=leftovers):
            if container.status != "running":  # a running one is another deploytool's read, now
                container.remove(force=True, v=True)
        try:
            self.client.volumes.get(name).remove()
        except docker.errors.APIError as exc:
            if exc.status_code != 409:
                raise
            users = sorted(
                c.name or c.short_id for c in self.client.containers.list(all=True, filters={"volume": name})
            )
            raise DeployError(
                f"volume {name} is still in use by {', '.join(users) or 'a container'}",
                hint="stop and remove what uses it (`docker rm -f NAME`), then run this again",
            ) from None

    def logs(
        self, release: Release, *, tail: int | None = None, since: float | None = None, follow: bool = False
    ) -> Any:
        """A release's log (stdout and stderr as the container wrote them), as bytes; with
        follow, an iterator of chunks that ends when the container stops."""
        container = self.client.containers.get(release.container_id)
        lines: Literal["all"] | int = "all" if tail is None else tail
        if follow:
            return container.logs(stream=True, follow=True, tail=lines, since=since, timestamps=False)
        return container.logs(stream=False, follow=False, tail=lines, since=since, timestamps=False)

    def exit_code(self, release: Release) -> int | None:
        state = self.client.containers.get(release.container_id).attrs.get("State", {})
        return state.get("ExitCode")

    def logs_tail(self, release: Release, lines: int = 30) -> str:
        try:
            raw = self.client.containers.get(release.container_id).logs(tail=lines)
        except docker.errors.NotFound:
            return "(container is gone)"
        return raw.decode("utf-8", "replace").rstrip()

    # -- images ----------------------------------------------------------------------------
    def image(self, reference: str) -> Any | None:
        try:
            return self.client.images.get(reference)
        except docker.errors.ImageNotFound:
            return None

    def image_labels(self, reference: str) -> dict[str, str]:
        image = self.image(reference)
        return dict(image.labels or {}) if image is not None else {}

    def images_labelled(self, label: str) -> list[tuple[str, dict[str, str], str]]:
        """(reference, labels, created) of every image carrying `label` (KEY=VALUE)."""
        found = self.client.images.list(filters={"label": label})
        return [
            ((i.tags or [i.id or ""])[0], dict(i.labels or {}), i.attrs.get("Created", "")) for i in found
        ]

    def build_events(
        self, context_dir: Path, *, tag: str, labels: dict[str, str], no_cache: bool
    ) -> Iterator[dict[str, Any]]:
        """The classic builder's event stream (stream lines, aux image id, error events)."""
        try:
            yield from self.client.api.build(
                path=str(context_dir),
                tag=tag,
                labels=labels,
                decode=True,
                rm=True,
                forcerm=True,
                nocache=no_cache,
                pull=False,
            )
        except docker.errors.APIError as exc:
            raise BuildError(f"the engine refused the build of {tag}: {exc.explanation or exc}") from None
        except docker.errors.DockerException as exc:  # the engine went away mid-build
            raise EngineUnavailable(
                f"the Docker engine failed during the build of {tag}: {_short(exc)}",
                hint=HOW_TO_GET_AN_ENGINE,
            ) from None

    # -- throwaway containers ----------------------------------------------------------------
    def run_throwaway(
        self, image: str, script: str, *, volume: str | None = None, mount: str = "/cache", root: bool = False
    ) -> str:
        """Run a shell script in a throwaway container of `image` (no network; `volume` at
        `mount` when given) and return its standard output. A script that fails raises
        DeployError with its exit code and the tail of its standard error (of its standard
        output when it wrote nothing to standard error). The image's /tmp must be writable by
        the user the script runs as (`root=True` runs it as root).

        The script writes its two streams to files in the container, read back once it has
        exited. Its log is no record of them: on a loaded engine a container that exits as soon
        as it has printed sometimes has an empty log (measured: 1 run in 160, 8 at a time beside
        four busy loops on two cores, docs/measured/test-suite.md), whether the log is followed
        while it runs or read after it exits. The files are there until the container is removed."""
        volumes = {volume: {"bind": mount, "mode": "rw"}} if volume else None
        wrapped = f"( {script}\n) >{_THROWAWAY_OUT} 2>{_THROWAWAY_ERR}"
        container: Any = None
        try:
            with _interruptions_held():
                container = self.client.containers.create(
                    image,
                    entrypoint=["/bin/sh", "-c"],
                    command=[wrapped],
                    network_mode="none",
                    volumes=volumes,
                    user="0" if root else None,
                    # so that a clean-up finds it if this process dies before it removes it
                    labels={labels.THROWAWAY: labels.instance()},
                )
            container.start()
            status = container.wait()["StatusCode"]
            out = _file_in(container, _THROWAWAY_OUT)
            if out is None:  # the shell could not write its file: what it said is in its log
                raise DeployError(
                    f"a throwaway container of {image} could not write {_THROWAWAY_OUT} "
                    f"(exit {status}): "
                    + container.logs(stdout=True, stderr=True).decode("utf-8", "replace")[-2000:]
                )
            if status != 0:
                # stderr is copied out only for a failure (a success needs one archive read, not two);
                # a script that reports its trouble on stdout only is heard too
                said = (_file_in(container, _THROWAWAY_ERR) or "").strip() or out.strip()
                raise DeployError(f"a throwaway container of {image} failed (exit {status}): {said[-2000:]}")
            return out
        except docker.errors.ImageNotFound:
            raise DeployError(f"image {image} is not on this engine") from None
        finally:
            if container is not None:
                # already gone: the error that brought us here is the one to report
                with _interruptions_held(), contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True, v=True)  # v: an image's declared VOLUMEs go with it

    def run_argv(
        self, image: str, entrypoint: str, args: list[str], *, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """`docker run --rm --network none --entrypoint ENTRYPOINT IMAGE ARGS...`, its exit code
        and both streams (the flag check reads stdout, and stderr when it failed). The container
        is named and labelled as a throwaway of this instance: a client that gives up at the
        timeout leaves the container running (killing `docker run` does not stop it), so it is
        removed by that name, and a process that dies first leaves one a clean-up can find."""
        name = f"{labels.name_prefix()}-argv-{secrets.token_hex(6)}"
        cmd = [
            _docker_cli(),
            "run",
            "--rm",
            "--name",
            name,
            "--label",
            f"{labels.THROWAWAY}={labels.instance()}",
            "--network",
            "none",
            "--entrypoint",
            entrypoint,
            image,
            *args,
        ]
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            subprocess.run([_docker_cli(), "rm", "-f", name], capture_output=True, timeout=60)
            raise DeployError(
                f"a container of {image} did not finish within {timeout:g} s (removed)"
            ) from None

    # -- volumes -----------------------------------------------------------------------------
    def volume_exists(self, name: str) -> bool:
        try:
            self.client.volumes.get(name)
            return True
        except docker.errors.NotFound:
            return False

    def create_volume(self, name: str, labels: dict[str, str]) -> None:
        self.client.volumes.create(name=name, labels=labels)


def compose_config(source: Path | str, *, project: str | None = None) -> str:
    """`docker compose config`: the plugin's own validation of a rendered compose file (a path),
    or of a rendered document given as text on stdin, before it is written. It needs the docker
    CLI and its compose plugin, not a running engine."""
    stdin = None if isinstance(source, Path) else source
    cmd = [
        _docker_cli(),
        "compose",
        *(["-p", project] if project else []),
        "-f",
        "-" if stdin is not None else str(source),
        "config",
    ]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        # said here, not by a `compose version` before every plan: each `docker compose` is
        # three processes (the CLI, the plugin's metadata, the plugin), about 0.1 s of CPU
        if compose_plugin_version() is None:
            raise EngineUnavailable(
                "the docker compose v2 plugin is missing (docker said: "
                + " ".join((proc.stderr or "").strip().splitlines()[-1:])
                + ")",
                hint=HOW_TO_GET_AN_ENGINE,
            )
        what = source if stdin is None else f"the compose file of {project or 'a release'}"
        raise DeployError(f"docker compose rejected {what}:\n{_tail(proc.stderr, 15)}")
    return proc.stdout


def compose_plugin_version() -> str | None:
    """The compose v2 plugin's version, or None when it is missing (no engine needed)."""
    proc = subprocess.run(
        [_docker_cli(), "compose", "version", "--short"], capture_output=True, text=True, timeout=30
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def _docker_cli() -> str:
    found = shutil.which("docker")
    if found is None:
        raise EngineUnavailable("the `docker` command is not on PATH", hint=HOW_TO_GET_AN_ENGINE)
    return found


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) < 160 else text[:157] + "..."


def _tail(text: str, lines: int) -> str:
    return "\n".join("    " + line for line in (text or "").rstrip().splitlines()[-lines:])
