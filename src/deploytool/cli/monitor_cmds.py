"""top: the live view of what serves; monitor up, down, status: the Prometheus that follows it."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .app import ApiKeyFileOpt, ApiKeyOpt, JsonOpt, ProfileOpt, ProfilesDirOpt, app, console, print_json


@app.command("top")
def top_command(
    url: Annotated[Optional[list[str]], typer.Option("--url", help="A server to watch instead of this host's slots (repeatable).")] = None,
    profile: ProfileOpt = None,
    interval: Annotated[float, typer.Option("--interval", min=0.2, help="Seconds between rounds (the window of each rate and quantile).")] = 2.0,
    once: Annotated[bool, typer.Option("--once", help="Two rounds --interval apart, print the second, exit.")] = False,
    rounds: Annotated[Optional[int], typer.Option("--rounds", min=1, hidden=True, help="Stop after this many rounds.")] = None,
    profiles_dir: ProfilesDirOpt = None,
    api_key_file: ApiKeyFileOpt = None,
    api_key: ApiKeyOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Every release serving on this host (or --url): requests/s, tok/s, TTFT and TPOT p50/p99
    over the last round, running and queued, KV pool use, prefix hit rate, accept length, beside
    the profile's gates; each card's utilisation, memory, power, temperature. Refreshes in place
    until Ctrl-C; --once --json for scripts (docs/monitor.md)."""
    from ..monitor import top as top_lib
    from ..release import secrets

    key = secrets.client_api_key(key_file=api_key_file, given_on_command_line=api_key)
    top = top_lib.make_top(url, profile, profiles_dir, key)
    if once or json_output:
        result = top_lib.run_once(top, interval)
        if json_output:
            print_json(result.to_json())
        else:
            from ..monitor.top_view import render

            console.print(render(result))
        return
    from ..monitor.top_view import live

    live(top, console, interval, rounds)
