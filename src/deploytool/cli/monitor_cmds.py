"""top: the live view of what serves; monitor up, down, status: the Prometheus that follows it."""

from typing import TYPE_CHECKING, Annotated

import typer

from .app import (
    ApiKeyFileOpt,
    ApiKeyOpt,
    JsonOpt,
    ProfileOpt,
    ProfilesDirOpt,
    Typer,
    app,
    console,
    print_json,
)

if TYPE_CHECKING:
    from ..monitor.stack import MonitorStatus


@app.command("top")
def top_command(
    url: Annotated[
        list[str] | None,
        typer.Option("--url", help="A server to watch instead of this host's slots (repeatable)."),
    ] = None,
    profile: ProfileOpt = None,
    interval: Annotated[
        float,
        typer.Option(
            "--interval", min=0.2, help="Seconds between rounds (the window of each rate and quantile)."
        ),
    ] = 2.0,
    once: Annotated[
        bool, typer.Option("--once", help="Two rounds --interval apart, print the second, exit.")
    ] = False,
    rounds: Annotated[
        int | None, typer.Option("--rounds", min=1, hidden=True, help="Stop after this many rounds.")
    ] = None,
    profiles_dir: ProfilesDirOpt = None,
    api_key_file: ApiKeyFileOpt = None,
    api_key: ApiKeyOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Every release serving on this host (or --url): requests/s, tok/s, TTFT and TPOT p50/p99
    over the last round, running and queued, KV pool use, prefix hit rate, accept length, beside
    the profile's gates; each card's utilisation, memory, power, temperature. Refreshes in place
    until q or Ctrl-C; --once --json for scripts (docs/monitor.md)."""
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

    live(top, console.rich, interval, rounds)


monitor_app = Typer(
    help="A Prometheus that scrapes what serves on this host and follows every cut-over (docs/monitor.md).",
    no_args_is_help=True,
)
app.add_typer(monitor_app, name="monitor")


def _print_status(result: "MonitorStatus", json_output: bool) -> None:
    if json_output:
        print_json(result)
        return
    if not result.running:
        typer.echo(f"monitor: not running ({result.why}); data volume {result.volume}")
        return
    settings = result.settings or {}
    typer.echo(
        f"monitor: {result.url}  retention {settings.get('retention')}  scrape every "
        f"{settings.get('scrape_interval_s')} s  data volume {result.volume}"
    )
    for t in result.targets:
        labels = t["labels"]
        typer.echo(
            f"  {t['health']:<8} {labels.get('job')} slot {labels.get('slot', '-')} release "
            f"{labels.get('release', '-')} {t['url']}" + (f"  ({t['error']})" if t["error"] else "")
        )
    for a in result.alerts:
        typer.echo(f"  alert {a['name']} {a['state']} slot {a.get('slot') or '-'}")


@monitor_app.command("up")
def monitor_up(
    port: Annotated[int, typer.Option("--port", help="Prometheus's port on 127.0.0.1.")] = 9090,
    retention: Annotated[
        str, typer.Option("--retention", help="How long Prometheus keeps data (a Prometheus duration).")
    ] = "15d",
    scrape_interval: Annotated[
        int, typer.Option("--scrape-interval", min=1, help="Seconds between scrapes.")
    ] = 5,
    cards_exporter: Annotated[
        str | None,
        typer.Option(
            "--cards-exporter", help="HOST:PORT of NVIDIA's dcgm-exporter, for the throttling alert."
        ),
    ] = None,
    profiles_dir: ProfilesDirOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Build the monitor's image (Debian's prometheus on the local base image), write its
    configuration, targets and rules, and start it as its own compose project."""
    from ..monitor import stack
    from ..profiles import ProfileStore

    settings = stack.MonitorSettings(
        port=port, retention=retention, scrape_interval_s=scrape_interval, cards_exporter=cards_exporter
    )
    _print_status(stack.up(settings, ProfileStore(profiles_dir).all()), json_output)


@monitor_app.command("down")
def monitor_down(
    volumes: Annotated[
        bool, typer.Option("--volumes", help="Also remove the monitor's data volume (its recorded series).")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Stop the monitor; its data volume stays for the next `monitor up` unless --volumes."""
    from ..monitor import stack

    result = stack.down(volumes=volumes)
    if json_output:
        print_json(result)
    else:
        typer.echo(result.line())


@monitor_app.command("status")
def monitor_status(json_output: JsonOpt = False) -> None:
    """Whether the monitor runs, what it scrapes (each target's health) and the alerts firing."""
    from ..monitor import stack

    _print_status(stack.status(), json_output)
