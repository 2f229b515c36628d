"""What the monitor's tests share: clients that keep a server busy."""

from __future__ import annotations

import itertools
import threading
import time

import httpx


class Load:
    """Clients that keep the server busy until stopped: streamed chats, a few at once; a refused
    or cut request is counted and the next one sent."""

    def __init__(self, url: str, clients: int = 4):
        self.url, self.stop, self.done, self.failed = url, threading.Event(), 0, 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stop.is_set():
                body = {
                    "model": "sim-model",
                    "max_tokens": 40,
                    "stream": True,
                    "messages": [{"role": "user", "content": f"count to ten {time.monotonic()}"}],
                }
                try:
                    with client.stream("POST", "/v1/chat/completions", json=body) as response:
                        for _ in response.iter_lines():
                            pass
                    self.done += 1
                except httpx.HTTPError:  # a server stopping or not yet started, as in a hand-over
                    self.failed += 1
                    time.sleep(0.2)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def serving_gap(api: httpx.Client, slot: str, since: float, until: float) -> dict:
    """From Prometheus's own `up` samples of the slot's release targets between two times (unix
    seconds): the longest stretch with no successful scrape of any release, and the releases seen.
    A stretch is measured between two successful scrapes, so it is at least one scrape interval
    even when nothing was missed."""
    span = max(1, int(until - since) + 5)
    result = api.get(
        "/api/v1/query",
        params={"query": f'up{{job="deploytool-releases",slot="{slot}"}}[{span}s]', "time": f"{until:.3f}"},
    ).json()
    up_at: list[float] = []
    spans: dict[str, list[float]] = {}  # release: [first, last] successful scrape
    for series in result["data"]["result"]:
        for stamp, value in series["values"]:
            if since <= float(stamp) <= until and value == "1":
                up_at.append(float(stamp))
                span = spans.setdefault(series["metric"].get("release") or "?", [float(stamp), float(stamp)])
                span[0], span[1] = min(span[0], float(stamp)), max(span[1], float(stamp))
    up_at.sort()
    widest = (
        max((b - a, a, b) for a, b in itertools.pairwise(up_at)) if len(up_at) > 1 else (None, None, None)
    )
    return {
        "longest_s": widest[0],
        "from": widest[1],
        "to": widest[2],
        "samples_up": len(up_at),
        "releases": sorted(spans),
        "up_spans": spans,
    }
