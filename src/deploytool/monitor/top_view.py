"""`top`'s picture: one table of servers (a row per figure group, the gate beside each figure,
outside marked), one of cards, sparklines of the last rounds; and the loop that refreshes it in
place (rich's Live) until Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .figures import FIGURES
from .top import Round, Top

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None], width: int = 12) -> str:
    """The last `width` values as bars scaled to their own range; a missing value is a space."""
    tail = values[-width:]
    known = [v for v in tail if v is not None]
    if not known:
        return " " * len(tail)
    low, high = min(known), max(known)
    span = high - low
    return "".join(
        " " if v is None else BARS[0 if span == 0 else min(7, int((v - low) / span * 7.999))] for v in tail
    )


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "ratio":
        return f"{value * 100:.1f}%"
    if unit in ("tok/s", "1/s"):
        return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    return f"{value:g}" if float(value).is_integer() else f"{value:.2f}"


QUIT_HINT = "q or Ctrl-C quits"


def render(snapshot: Round, hint: str | None = None) -> Group:
    parts: list[Any] = [Text(hint, style="dim")] if hint else []
    if not snapshot.rows:
        parts.append(
            Text("no release serving on this host (`deploytool status`); `top --url URL` watches any server")
        )
    for row in snapshot.rows:
        t = row.target
        title = t.name if t.release is None else f"slot {t.name}: release {t.release}"
        health = t.health or "-"
        runtime = " (simulator)" if t.simulator else ""  # the reference runtime, not a model
        head = Text(f"{title}  profile {t.profile or '-'}{runtime}  health ")
        head.append(health, style="green" if health == "healthy" else ("yellow" if health == "-" else "red"))
        if t.release is not None:  # a --url server's name is its URL already
            head.append(f"  {t.url}")
        if row.figures.why:
            head.append(f"  {row.figures.why}", style="yellow")
        if t.why:
            head.append(f"  {t.why}", style="yellow")
        table = Table(title=head, title_justify="left", show_edge=False, pad_edge=False)
        for column in ("figure", "now", "gate", "last rounds"):
            table.add_column(column, no_wrap=True)
        gates = {g.key: g for g in t.gates}
        for figure in FIGURES:
            value = row.figures.get(figure.key)
            gate = gates.get(figure.key)
            outside = figure.key in row.broken
            now = Text(fmt(value, figure.unit), style="bold red" if outside else "")
            if outside:
                now.append(" !", style="bold red")
            gate_text = (
                "-"
                if gate is None
                else f"{'>=' if gate.kind == 'min' else '<='} {fmt(gate.bound, figure.unit)}"
            )
            table.add_row(figure.title, now, gate_text, sparkline(row.history.get(figure.key, [])))
        parts.append(table)
    cards = snapshot.cards
    if cards.error:
        parts.append(Text(f"cards: {cards.error}", style="dim"))
    elif cards.cards:
        table = Table(title=f"cards ({cards.source})", title_justify="left", show_edge=False, pad_edge=False)
        for column in ("#", "name", "util", "memory", "power", "temp", "throttle"):
            table.add_column(column, no_wrap=True)
        for c in cards.cards:
            memory = (
                "-"
                if c.memory_used_mib is None
                else f"{c.memory_used_mib / 1024:.1f}/{(c.memory_total_mib or 0) / 1024:.0f} GiB"
            )
            power = (
                "-"
                if c.power_w is None
                else f"{c.power_w:.0f}" + (f"/{c.power_limit_w:.0f} W" if c.power_limit_w else " W")
            )
            throttle = Text(", ".join(c.throttle) or "-", style="bold red" if c.throttle else "")
            table.add_row(
                str(c.index),
                c.name,
                "-" if c.utilization_pct is None else f"{c.utilization_pct}%",
                memory,
                power,
                "-" if c.temperature_c is None else f"{c.temperature_c} C",
                throttle,
            )
        parts.append(table)
    return Group(*parts)


def live(top: Top, console: Any, interval: float, rounds: int | None = None) -> None:
    """Refresh in place every `interval` seconds until `q` (read from a terminal) or Ctrl-C;
    `rounds` stops after that many (tests)."""
    from rich.live import Live

    async def loop() -> None:
        quit_pressed = asyncio.Event()
        try:
            with _keys(asyncio.get_running_loop(), quit_pressed) as hint:
                first = await top.round()
                with Live(render(first, hint), console=console, auto_refresh=False, screen=False) as view:
                    done = 1
                    while (rounds is None or done < rounds) and not quit_pressed.is_set():
                        try:
                            await asyncio.wait_for(quit_pressed.wait(), interval)
                            break
                        except TimeoutError:
                            pass
                        view.update(render(await top.round(), hint), refresh=True)
                        done += 1
        finally:
            await top.aclose()

    with contextlib.suppress(KeyboardInterrupt):  # how one leaves a live view: not an error
        asyncio.run(loop())


@contextlib.contextmanager
def _keys(loop: asyncio.AbstractEventLoop, quit_pressed: asyncio.Event) -> Iterator[str]:
    """On a terminal, keys are read one at a time (cbreak: no Enter needed, Ctrl-C still
    interrupts) and `q` sets quit_pressed; the terminal's mode is restored on the way out.
    Yields the hint the view shows."""
    fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
    if fd is None:  # piped or redirected: nothing to read keys from
        yield "Ctrl-C quits"
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)

    def on_key() -> None:
        if b"q" in os.read(fd, 64).lower():
            quit_pressed.set()

    try:
        tty.setcbreak(fd)
        loop.add_reader(fd, on_key)
        yield QUIT_HINT
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
