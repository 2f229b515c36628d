"""python -m deploytool.sim --port N [--host 0.0.0.0] [settings flags]"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from deploytool.sim import hostile, launch_rules
from deploytool.sim.app import create_app
from deploytool.sim.faults import CRASH_EXIT_CODE, parse_faults
from deploytool.sim.log import log
from deploytool.sim.server import run
from deploytool.sim.settings import SimSettings


def main(argv: Sequence[str] | None = None) -> int:
    settings = SimSettings.from_env_and_args(sys.argv[1:] if argv is None else argv)
    if parse_faults(settings.faults).crash_on_start:
        log(
            f"FAULT crash_on_start: deploytool.sim (a simulator, not a model) exits with status "
            f"{CRASH_EXIT_CODE} before serving anything"
        )
        return CRASH_EXIT_CODE
    failure = launch_rules.start_failure(settings)
    if failure:  # the memory rule: a launch SGLang could not start fails here, before listening
        log(f"cannot start: {failure}")
        return 1
    try:
        app = create_app(settings)
    except ValueError as exc:  # e.g. --gsm8k-oracle without a readable GSM8K file
        log(f"cannot start: {exc}")
        return 2
    hostile.log_at_start(parse_faults(settings.faults), settings.api_key)
    run(settings, app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
