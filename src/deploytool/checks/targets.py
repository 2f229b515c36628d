"""What `qualify` and `bench` measure: an endpoint given by URL, or the release serving a slot.

`--url URL` needs no engine; `--cpu` / `--gpu UUID` find the running release of that slot by
its labels and use its published port, its profile and its image's labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import FieldError, UsageError
from ..host.engine import Engine
from ..host.releases import Release
from ..host.slots import Slot
from ..profiles import Profile, ProfileStore
from ..redaction import scrub
from ..release import inputs as release_inputs
from ..release import secrets
from ..release.state import release_path


@dataclass
class Target:
    url: str
    profile: Profile | None
    slot: Slot | None = None
    release: Release | None = None
    image_labels: dict[str, str] | None = None
    previous: Release | None = None  # the slot's previous release, for comparisons
    previous_results: Path | None = None  # the baseline release's qualify results.json, when it has one
    baseline: str | None = None  # which release the comparisons are against, and the rule that chose it
    # the key clients send (never printed: repr=False) and the weights the release serves.
    api_key: str | None = field(default=None, repr=False)
    model: dict[str, Any] | None = None

    def describe(self) -> str:
        if self.release is None:
            return self.url
        return f"{self.url} (slot {self.release.slot}, release {self.release.release}, profile {self.release.profile})"


@dataclass(frozen=True)
class TargetRequest:
    """What to measure, as the CLI resolved it: `url`, or the release serving `slot` (the
    `--cpu` / `--cpu-slot` / `--gpu` options already turned into a Slot). `api_key_file`, else
    DEPLOYTOOL_API_KEY, else the release's (or the profile's) own key; `api_key_flag` is a key
    given on the command line, kept only to be refused (it shows in `ps` and the shell's
    history). `against`: the release of the slot to compare with instead of the rule's."""

    url: str | None = None
    slot: Slot | None = None
    profile_name: str | None = None
    profiles_dirs: tuple[Path, ...] | None = None
    api_key_file: Path | None = None
    api_key_flag: str | None = field(default=None, repr=False)
    against: int | None = None


def resolve_target(request: TargetRequest) -> Target:
    """The endpoint of `request`: its URL as given, or the newest running release of its slot,
    with that release's profile, image labels, key and the baseline to compare with."""
    url, slot, against = request.url, request.slot, request.against
    store = ProfileStore(list(request.profiles_dirs) if request.profiles_dirs else None)
    given_key = secrets.client_api_key(
        key_file=request.api_key_file, given_on_command_line=request.api_key_flag
    )
    if url:
        if slot is not None:
            raise FieldError(
                "url", "names an endpoint, and a slot is given too: give the URL or the slot, not both"
            )
        if against is not None:
            raise FieldError(
                "against", "names a release of a slot, and a URL is no slot: give the slot instead"
            )
        if not url.startswith(("http://", "https://")):
            raise FieldError("url", "is not an http(s) URL", value=repr(scrub(url)))
        refuse_url_credentials(url)
        profile = store.get(request.profile_name) if request.profile_name else None
        if given_key is None and profile is not None and profile.server.api_key is not None:
            given_key = profile.server.api_key.resolve(what=f"server.api_key of profile {profile.name}")
        return Target(url=url.rstrip("/"), profile=profile, api_key=given_key)
    if slot is None:
        raise FieldError("url", "no endpoint: give a URL, or the slot whose release to measure")
    engine = Engine()
    releases = engine.releases(slot.name)
    serving = [r for r in releases if r.running]
    if not serving:
        raise UsageError(
            f"nothing is serving on slot {slot.name}",
            hint="`deploytool status` shows the slots; `deploytool up` starts a release",
        )
    current = max(serving, key=lambda r: r.release)
    profile = store.get(request.profile_name or current.profile)
    chosen = baseline_release(slot, releases, current.release, against=against)
    previous = next((r for r in releases if r.release == chosen.release), None)
    record = release_inputs.read_record(slot.name, current.release)
    key = given_key if given_key is not None else release_inputs.release_api_key(slot.name, current.release)
    return Target(
        url=current.url,
        profile=profile,
        slot=slot,
        release=current,
        image_labels=engine.image_labels(current.image),
        previous=previous,
        previous_results=chosen.results,
        baseline=chosen.describe(),
        api_key=key,
        model=record.get("model"),
    )


def refuse_url_credentials(url: str) -> None:
    """A URL with user:password@ would put the key in results.json, the reports and `ps`."""
    try:
        parts = urlsplit(url)
        has_credentials = parts.username is not None or parts.password is not None
    except ValueError:
        has_credentials = "@" in url.split("/", 3)[2] if url.count("/") >= 2 else False
    if has_credentials:
        raise FieldError(
            "url",
            "carries credentials (user:password@): they would be written into the reports and show in `ps`",
            value=repr(scrub(url)),
            hint=f"give the URL without them and the key in a file (--api-key-file PATH, mode 0600) "
            f"or in {secrets.API_KEY_ENV}",
        )


@dataclass(frozen=True)
class Baseline:
    """The release a qualification compares with (its stored results), and why that one."""

    release: int | None
    results: Path | None
    rule: str

    def describe(self) -> str:
        if self.release is None:
            return f"none ({self.rule})"
        kept = "" if self.results else "; it has no stored qualify results"
        return f"release {self.release} ({self.rule}{kept})"


def baseline_release(
    slot: Slot, releases: list[Release], current: int, *, against: int | None = None
) -> Baseline:
    """The rule: `against` when given; else the release that served the slot before `current`
    was cut over (the journal's cut-over line); else, with no such line, the newest older
    release the engine still has. Never a newer release: after a rollback to N, N is compared
    with what served before N, not with the release just rolled back from."""
    if against is not None:
        if against == current:
            raise FieldError("against", "that is the release being qualified", value=str(against))
        results = qualify_results_path(slot, against)
        if results is None:
            raise FieldError(
                "against",
                f"slot {slot.name} has no stored qualify results for release {against}",
                value=str(against),
                hint="`deploytool reports` lists the reports kept per slot and release",
            )
        return Baseline(against, results, "--against")
    from ..release.state import read_journal

    cut = [e for e in read_journal(slot.name) if e.get("event") == "cutover" and e.get("release") == current]
    if cut:
        before = cut[0].get("previous")
        if before is None:
            return Baseline(None, None, f"release {current} was the slot's first cut over")
        return Baseline(
            before, qualify_results_path(slot, before), f"it served before release {current} was cut over"
        )
    older = [r.release for r in releases if r.release < current]
    if not older:
        return Baseline(None, None, f"no release of slot {slot.name} older than {current}")
    newest = max(older)
    return Baseline(
        newest,
        qualify_results_path(slot, newest),
        f"the newest older release; the journal has no cut-over line for release {current}",
    )


def unqualified(slot: str, release: int) -> str:
    """Why a release has no qualify results to compare with, in words for a report's first screen."""
    from ..release.state import read_journal

    if any(e.get("event") == "qualify.skipped" and e.get("release") == release for e in read_journal(slot)):
        return (
            f"release {release} was not qualified (brought up with --skip-qualify): nothing to compare with"
        )
    return f"release {release} has no stored qualify results: nothing to compare with"


def qualify_results_path(slot: Slot, release: int) -> Path | None:
    path = release_path(slot.name, release) / "qualify" / "results.json"
    return path if path.exists() else None
