"""deploytool.sim: the reference runtime, a simulator of an SGLang server (not a model).

It speaks SGLang's OpenAI-compatible wire format and answers by documented rules
(docs/sim.md). Needs only the standard library, starlette, uvicorn and pillow.

    from deploytool.sim import SimSettings, serve_in_thread
    with serve_in_thread(SimSettings(startup_seconds=0), wait_ready=True) as sim:
        httpx.get(sim.url + "/v1/models")
"""

import os
import signal
import sys

if os.getpid() == 1:
    # A container's main process: the kernel drops a signal that PID 1 has no handler for, so
    # a `docker stop` during the imports below (a release stopped as it starts: an up or a
    # rollout interrupted by Ctrl-C) would wait out the whole stop timeout. uvicorn installs
    # its own graceful handlers once it serves.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

from deploytool.sim.app import create_app
from deploytool.sim.server import SimHandle, run, serve_in_thread
from deploytool.sim.settings import SimSettings
from deploytool.sim.tokens import count_tokens

__all__ = ["SimHandle", "SimSettings", "count_tokens", "create_app", "run", "serve_in_thread"]
