"""deploytool.sim: the reference runtime, a simulator of an SGLang server (not a model).

It speaks SGLang's OpenAI-compatible wire format and answers by documented rules
(docs/sim.md). Needs only the standard library, starlette, uvicorn and pillow.

    from deploytool.sim import SimSettings, serve_in_thread
    with serve_in_thread(SimSettings(startup_seconds=0), wait_ready=True) as sim:
        httpx.get(sim.url + "/v1/models")
"""

from deploytool.sim.app import create_app
from deploytool.sim.server import SimHandle, run, serve_in_thread
from deploytool.sim.settings import SimSettings
from deploytool.sim.tokens import count_tokens

__all__ = ["SimHandle", "SimSettings", "count_tokens", "create_app", "run", "serve_in_thread"]
