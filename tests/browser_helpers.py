"""Debian's headless Chromium, driven over the DevTools protocol (websocket-client), to read a
report's laid-out DOM the way a person's browser shows it: geometry at a given window, images
decoded, and a screenshot. The page itself runs no script (its policy forbids any); the
measurements are DevTools' own evaluation, outside the page's policy."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, page: Path | str, profile_dir: Path, width: int = 1280, height: int = 1000) -> None:
        import websocket  # websocket-client, installed with the Docker SDK

        assert CHROMIUM is not None
        profile_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
                f"--window-size={width},{height}",
                f"--user-data-dir={profile_dir}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = profile_dir / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30).read())
        page_ws = next(p["webSocketDebuggerUrl"] for p in pages if p.get("type") == "page")
        self.ws = websocket.create_connection(page_ws, timeout=60)
        self.ids = itertools.count(1)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.call("Page.enable")
        self.navigate(page)

    def navigate(self, page: Path | str) -> None:
        """A file, or a URL (a server's own page)."""
        self.call("Page.navigate", url=page if isinstance(page, str) else page.resolve().as_uri())
        self._wait_loaded()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def _wait_loaded(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.evaluate("document.readyState") == "complete":
                return
            time.sleep(0.1)
        raise RuntimeError("the page never finished loading")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def screenshot(self, path: Path, width: int = 1280, height: int = 1000, scale: float = 0.6) -> None:
        shot = self.call(
            "Page.captureScreenshot",
            format="png",
            clip={"x": 0, "y": 0, "width": width, "height": height, "scale": scale},
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# What a person sees in the first screen, and what the folded sections hold, read from the DOM.
LAYOUT = """(() => {
  const box = el => { if (!el) return null; const r = el.getBoundingClientRect();
                      return {top: r.top + scrollY, bottom: r.bottom + scrollY, width: r.width}; };
  const table = document.querySelector('table.compare');
  return {
    h1: box(document.querySelector('h1')), h1_text: document.querySelector('h1').innerText,
    headline: document.querySelector('.headline').innerText,
    table: box(table),
    headers: table ? [...table.querySelectorAll('th')].map(th => th.innerText) : [],
    rows: table ? [...table.querySelectorAll('tr')].slice(1).map(tr => ({
      cells: [...tr.querySelectorAll('td')].map(td => td.innerText), cls: tr.className, box: box(tr)})) : [],
    images: [...document.images].map(img => ({alt: img.alt, src: img.src.slice(0, 22), box: box(img),
                                             complete: img.complete, natural: img.naturalWidth})),
    details: [...document.querySelectorAll('details')].map(d => ({id: d.id, open: d.open,
                                                                  text: d.textContent})),
    scripts: document.scripts.length,
  };
})()"""
