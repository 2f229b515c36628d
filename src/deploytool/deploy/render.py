"""`deploytool render`: one release's compose file, as `up` would write it, without an engine:
the image tag derives from the profile's declared inputs (no build, no download)."""

from __future__ import annotations

from pathlib import Path

from ..host.slots import Slot
from ..image.build import plan_build
from ..image.runtime_source import runtime_notes
from ..profiles import ProfileStore
from ..release.compose import RenderRequest, render_text


def render_compose(
    profile_name: str,
    slot: Slot,
    *,
    release: int = 1,
    image: str | None = None,
    host_port: int | None = None,
    bind: str = "127.0.0.1",
    expose_without_key: bool = False,
    profiles_dirs: list[Path] | None = None,
    wheelhouse: Path | None = None,
) -> str:
    """The compose document's text; `image` defaults to the tag `build` would give."""
    profile = ProfileStore(profiles_dirs).get(profile_name)
    reference = image or plan_build(profile, wheelhouse=wheelhouse).tag
    return render_text(
        RenderRequest(
            profile=profile,
            slot=slot,
            release=release,
            image=reference,
            host_port=host_port,
            bind=bind,
            runtime_notes=tuple(runtime_notes(profile)),
            expose_without_key=expose_without_key,
        )
    )
