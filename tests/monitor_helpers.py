"""What the monitor's tests share: clients that keep a server busy."""

from __future__ import annotations

import threading
import time

import httpx


class Load:
    """Clients that keep the server busy until stopped: streamed chats, a few at once."""

    def __init__(self, url: str, clients: int = 4):
        self.url, self.stop, self.done = url, threading.Event(), 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stop.is_set():
                body = {"model": "sim-model", "max_tokens": 40, "stream": True,
                        "messages": [{"role": "user", "content": f"count to ten {time.monotonic()}"}]}
                with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    for _ in response.iter_lines():
                        pass
                self.done += 1

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)
