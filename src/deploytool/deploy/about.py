"""What this deploytool is, for a bug report: its version, where its data folders were read
from, and the SGLang releases it carries rules for (`deploytool --version`, `doctor`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import __version__
from ..resources import data_origin, resource


@dataclass
class About:
    version: str
    data: str  # the folder that holds profiles/, images/, compose/, qualify/
    data_origin: str  # package data, source tree or DEPLOYTOOL_RESOURCES
    # what carries rules for which SGLang releases: the memory planner, the image recipe's
    # version matrix, the shipped patch series
    sglang: dict[str, list[str]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        releases = sorted({r for rs in self.sglang.values() for r in rs}, key=_release_key)
        parts = "; ".join(f"{what}: {', '.join(rs) or 'none'}" for what, rs in self.sglang.items())
        return [
            f"deploytool {self.version}",
            f"SGLang releases with rules: {', '.join(releases)} ({parts})",
            f"data: {self.data} ({self.data_origin})",
        ]


def about() -> About:
    from ..image.patches import RECIPE
    from ..image.versions import load_matrix
    from ..memory.releases import MODELLED_RELEASES

    root, origin = data_origin()
    patches = resource("images", RECIPE, "patches")
    series = (
        sorted((p.name for p in patches.iterdir() if p.is_dir()), key=_release_key)
        if patches.is_dir()
        else []
    )
    return About(
        version=__version__,
        data=str(root),
        data_origin=origin,
        sglang={
            "memory plans": list(MODELLED_RELEASES),
            "image recipe": sorted(load_matrix().sglang, key=_release_key),
            "patch series": series,
        },
    )


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in release.split("."))
