"""Dry runs on a host whose Docker engine does not answer.

A plan needs the engine only for what the engine holds: the slot's releases, the image, the
cache volume. Where no engine answers, nothing deploytool started can be serving (a release is
a container), so `up --dry-run` and `rollout --dry-run` plan the slots as having no release and
say so, instead of refusing to show anything. The rendered compose documents are still checked
by `docker compose config` when the docker CLI and its compose plugin are installed (they need
no engine). Only dry runs get this: a real `up` or `rollout` needs the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import EngineUnavailable


class NoEngine:
    """The engine's read calls, as a host without a running engine answers them."""

    def __init__(self, reason: str):
        self.absent_reason = reason  # facts and plans name it
        self.unchecked: list[str] = []  # what could not be checked at all

    def releases(self, slot: str | None = None) -> list[Any]:
        return []

    def release(self, slot: str, number: int) -> Any:
        return None

    def image(self, reference: str) -> Any:
        return None

    def image_labels(self, reference: str) -> dict[str, str]:
        return {}

    def volume_exists(self, name: str) -> bool:
        return False

    def compose_version(self) -> str | None:
        from ..host.engine import compose_plugin_version

        try:
            return compose_plugin_version()
        except EngineUnavailable:  # no docker CLI at all
            return None

    def compose_config(self, source: Path | str, *, project: str | None = None) -> str:
        from ..host.engine import compose_config

        if self.compose_version() is None:
            note = "the compose documents are not checked by `docker compose config`: no docker CLI or compose plugin"
            if note not in self.unchecked:
                self.unchecked.append(note)
            return ""
        return compose_config(source, project=project)


def engine_for_dry_run() -> Any:
    """The engine when it answers, else a NoEngine saying why."""
    from ..host.engine import Engine

    try:
        return Engine()
    except EngineUnavailable as exc:
        return NoEngine(exc.reason)


def engine_note(reason: str) -> str:
    return (
        f"no Docker engine answers ({reason}): planned as if no slot had a release, since none can "
        "serve without one; the image and the cache volume are not known; a real run needs the engine"
    )
