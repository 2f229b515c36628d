"""One-line stderr logging: the sim runs in containers where stderr is the log."""

from __future__ import annotations

import sys
import time


def log(message: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[sim {stamp}] {message}", file=sys.stderr, flush=True)
