"""`deploytool top`: rounds of scrapes over every release serving on this host (or given URLs),
each round turned into the figures of figures.py beside the profile's gates, and the cards'
readings of the moment.

A round never fails as a whole: a target whose /metrics cannot be read (a release restarting, a
cut-over between two rounds) shows as such with its reason, and the next round starts over from
the scrape it gets then. The history of a slot belongs to the release that served it: after a
cut-over the rates start again from the new release's counters, never across two servers.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..host.gpu_live import CardsNow, read_cards
from .figures import FIGURES, KEYS, Figures, Scrape, figures

HISTORY = 30  # rounds kept for the sparklines
KV_NEAR_FULL = 0.95  # deploytool's own line for "the KV pool is full", no profile sets one


@dataclass
class Gate:
    key: str
    bound: float
    kind: str  # "min" or "max"
    source: str  # where the bound comes from: the profile's field, or deploytool's default

    def broken(self, value: float | None) -> bool:
        if value is None:
            return False
        return value < self.bound if self.kind == "min" else value > self.bound

    def to_json(self) -> dict[str, Any]:
        return {"bound": self.bound, "kind": self.kind, "source": self.source}


@dataclass
class Target:
    """One server to watch: a slot's serving release, or a URL given on the command line."""

    name: str  # the slot, or the URL
    url: str
    release: int | None = None
    profile: str | None = None
    health: str | None = None
    cards: list[str] = field(default_factory=list)  # GPU UUIDs (empty: the CPU slot, or a URL)
    gates: list[Gate] = field(default_factory=list)
    api_key: str | None = field(default=None, repr=False)  # never printed
    why: str | None = None  # why the target itself could not be worked out (a key unreadable)
    simulator: bool = False  # deploytool's reference runtime, not a model


def gates_of(profile: Any) -> list[Gate]:
    """The profile's own promises that `top` can hold a live figure to: the accept length its
    preflight expects, its monitor: latency targets; and the KV pool's near-full line, which is
    deploytool's."""
    out = [Gate("kv_use", KV_NEAR_FULL, "max", "deploytool: KV pool near full")]
    if profile is None:
        return out
    expect = ((profile.qualify or {}).get("preflight") or {}).get("expect") or {}
    accept = expect.get("min_accept_length")
    if isinstance(accept, (int, float)) and not isinstance(accept, bool):
        out.append(
            Gate("spec_accept_length", float(accept), "min", "qualify.preflight.expect.min_accept_length")
        )
    for key in ("ttft_p99_s", "tpot_p99_s"):
        bound = getattr(profile.monitor, key, None)
        if bound is not None:
            out.append(Gate(key, float(bound), "max", f"monitor.{key}"))
    return out


def host_targets(profiles_dirs: list | None = None) -> list[Target]:
    """Every release serving on this host, from the engine's labels: this instance's slots as
    `deploytool status` sees them, then those of any other deploytool instance on the engine
    (another user's, DEPLOYTOOL_INSTANCE), named with their instance."""
    from ..deploy.status import status
    from ..profiles import ProfileStore
    from ..release import inputs

    store = ProfileStore(profiles_dirs)
    out = []
    for slot in status(events=0):
        serving = next((r for r in slot.releases if r["release"] == slot.serving), None)
        if serving is None:
            continue
        target = Target(
            slot.slot,
            serving["url"],
            serving["release"],
            serving["profile"],
            serving["health"],
            list(serving.get("gpus") or []),
            simulator=bool(serving.get("simulator")),
        )
        _gates(target, store)
        if serving.get("api_key") == "required":
            try:
                target.api_key = inputs.release_api_key(slot.slot, serving["release"])
            except Exception as exc:
                target.why = f"the release's API key cannot be read: {type(exc).__name__}"
        out.append(target)
    return out + other_instances(store)


def other_instances(store: Any) -> list[Target]:
    """The newest running release of each slot of every other instance. Its state folder (its
    pointers, its key file) is that user's; SGLang serves /metrics without a key, so none is sent."""
    from ..host import engine_api
    from ..host.labels import instance

    releases = engine_api.read_releases(every_instance=True) or []
    newest: dict[tuple[str, str], Any] = {}
    for r in releases:
        if r.instance != instance() and (r.running or r.state == "restarting"):
            key = (r.instance, r.slot)
            if key not in newest or r.release > newest[key].release:
                newest[key] = r
    out = []
    for (owner, slot), r in sorted(newest.items()):
        target = Target(
            f"{slot} of instance {owner}",
            r.url,
            r.release,
            r.profile,
            r.health,
            list(r.gpus),
            simulator=r.simulator,
        )
        _gates(target, store, theirs=True)
        out.append(target)
    return out


def _gates(target: Target, store: Any, *, theirs: bool = False) -> None:
    try:
        target.gates = gates_of(store.get(target.profile))
    except Exception as exc:
        target.gates = gates_of(None)
        if not theirs:  # another user's profile may live in their own profiles folder: not a fault here
            target.why = f"profile {target.profile}: {exc}"


def url_target(url: str, profile: Any = None, api_key: str | None = None) -> Target:
    return Target(
        url.rstrip("/"),
        url.rstrip("/"),
        profile=getattr(profile, "name", None),
        gates=gates_of(profile),
        api_key=api_key,
        simulator=bool(getattr(profile, "is_simulator", False)),
    )


async def scrape(target: Target, client: Any = None, timeout: float = 5.0) -> Scrape:
    """One read of the target's /metrics, through `client` (an EndpointClient kept between
    rounds: a new client per round costs more CPU than the scrape itself), else a fresh one."""
    from ..server.client import EndpointClient

    at = time.monotonic()
    own = client is None
    if own:
        client = EndpointClient(target.url, timeout=timeout, max_connections=2, api_key=target.api_key)
    try:
        response = await client.get("/metrics", timeout=timeout)
    except Exception as exc:
        return Scrape(at, None, f"/metrics unreadable: {type(exc).__name__}")
    finally:
        if own:
            await client.aclose()
    if response.status_code != 200:
        return Scrape(
            at,
            None,
            f"/metrics answered HTTP {response.status_code}"
            + (" (SGLang serves it only with --enable-metrics)" if response.status_code == 404 else ""),
        )
    return Scrape.of_text(response.text, at)


@dataclass
class Row:
    target: Target
    figures: Figures
    broken: list[str]  # the figures outside their gate
    history: dict[str, list[float | None]]

    def to_json(self) -> dict[str, Any]:
        t = self.target
        return {
            "name": t.name,
            "url": t.url,
            "release": t.release,
            "profile": t.profile,
            "health": t.health,
            "simulator": t.simulator,
            "cards": t.cards,
            "why": t.why,
            "figures": self.figures.to_json(),
            "gates": {g.key: g.to_json() for g in t.gates},
            "outside": self.broken,
        }


@dataclass
class Round:
    rows: list[Row]
    cards: CardsNow
    at: float  # wall clock (time.time())

    def to_json(self) -> dict[str, Any]:
        return {
            "at": round(self.at, 3),
            "servers": [r.to_json() for r in self.rows],
            "cards": {
                "source": self.cards.source,
                "error": self.cards.error,
                "cards": [c.to_json() for c in self.cards.cards],
            },
            "figures": [{"key": f.key, "title": f.title, "unit": f.unit} for f in FIGURES],
        }


class Top:
    """The state between rounds: each (target, release)'s last scrape and its history."""

    def __init__(self, find_targets: Any, read_gpus: Any = read_cards):
        self.find_targets = find_targets  # called every round: a cut-over or a new slot shows up
        self.read_gpus = read_gpus
        self.last: dict[tuple[str, int | None], Scrape] = {}
        self.history: dict[tuple[str, int | None], dict[str, deque]] = {}
        self.clients: dict[tuple[str, str | None], Any] = {}  # one per server, kept between rounds

    def _client(self, target: Target) -> Any:
        from ..server.client import EndpointClient

        key = (target.url, target.api_key)
        if key not in self.clients:
            self.clients[key] = EndpointClient(
                target.url, timeout=5.0, max_connections=2, api_key=target.api_key
            )
        return self.clients[key]

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()
        self.clients.clear()

    async def round(self) -> Round:
        try:
            targets = self.find_targets()
        except Exception as exc:
            targets = [Target("(engine)", "", why=f"cannot list the releases: {type(exc).__name__}: {exc}")]
        scrapes = await asyncio.gather(
            *(scrape(t, self._client(t)) if t.url else _no_scrape(t) for t in targets)
        )
        # A server given by URL has no engine health check to read: its own /health answers.
        await asyncio.gather(
            *(_probe_health(t, self._client(t)) for t in targets if t.url and t.release is None)
        )
        for gone in set(self.clients) - {(t.url, t.api_key) for t in targets}:  # a server cut over from
            await self.clients.pop(gone).aclose()
        rows = []
        seen = set()
        for target, now in zip(targets, scrapes, strict=True):
            key = (target.name, target.release)
            seen.add(key)
            before = self.last.get(key, Scrape(now.at, None, "the first scrape: rates from the next round"))
            f = figures(before, now)
            if now.series is not None:
                self.last[key] = now
            else:  # a failed scrape: the next good one starts the window again
                self.last.pop(key, None)
            history = self.history.setdefault(key, {k: deque(maxlen=HISTORY) for k in KEYS})
            for k in KEYS:
                history[k].append(f.get(k))
            broken = [g.key for g in target.gates if g.broken(f.get(g.key))]
            rows.append(Row(target, f, broken, {k: list(v) for k, v in history.items()}))
        for ended in set(self.last) - seen:  # a release cut over from, or stopped: its history ends
            self.last.pop(ended, None)
            self.history.pop(ended, None)
        return Round(rows, self.read_gpus(), time.time())


async def _probe_health(target: Target, client: Any) -> None:
    try:
        response = await client.get("/health", timeout=5.0)
    except Exception as exc:
        target.health = f"unreachable ({type(exc).__name__})"
        return
    target.health = "healthy" if response.status_code == 200 else f"unhealthy (HTTP {response.status_code})"


async def _no_scrape(target: Target) -> Scrape:
    return Scrape(time.monotonic(), None, target.why or "no URL")


async def once(top: Top, interval: float) -> Round:
    """Two rounds `interval` seconds apart: the second has rates over that window."""
    try:
        await top.round()
        await asyncio.sleep(interval)
        return await top.round()
    finally:
        await top.aclose()


def make_top(
    urls: list[str] | None,
    profile_name: str | None = None,
    profiles_dirs: list | None = None,
    api_key: str | None = None,
) -> Top:
    """The Top for `deploytool top`: the given URLs (with --profile's gates), else every slot
    on this host, listed again each round."""
    if urls:
        profile = None
        if profile_name:
            from ..profiles import ProfileStore

            profile = ProfileStore(profiles_dirs).get(profile_name)
        targets = [url_target(u, profile, api_key) for u in urls]
        return Top(lambda: targets)
    return Top(lambda: host_targets(profiles_dirs))


def run_once(top: Top, interval: float) -> Round:
    return asyncio.run(once(top, interval))
