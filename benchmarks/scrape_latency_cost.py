"""The latency a scraper adds to the requests a server is serving: TTFT and total latency p50/p99
of streamed chats under a steady load, with no scraper, with one at the monitor's 5 s, and with
one at 0.5 s (a worst case), in interleaved phases.

    .venv/bin/python benchmarks/scrape_latency_cost.py [REPEATS] [PHASE_SECONDS] [CLIENTS]

Starts the reference runtime in its own process (metrics on, 100 output tokens/s per request,
20 ms of scheduling before each prefill, 8 requests running at once), keeps CLIENTS streamed
chats of 48 tokens (ignore_eos, so every answer is that long) going back to back through
deploytool's own EndpointClient (a closed loop), and switches the scraper between phases in the
order A B C C B A, REPEATS times, so drift in the machine's other load falls on every setting
alike. The scraper is its own process (in this one it would share the event loop and the GIL
with the client and be counted as server time); each phase starts a fresh one, the no-scraper
phase too (it only sleeps), so the start of a process falls on every phase alike. A scrape is
what the monitor does at each interval: GET /metrics and GET /health (two jobs at one interval),
first at a random offset within the interval, as Prometheus spreads its targets. A request
counts for the phase it started in; those started while the scraper is being switched are dropped.

Per setting: requests/s served, the scraper's own requests/s (two GETs a scrape), TTFT and
latency p50/p99 over all its requests, and the p99 ratio against no scraper: pooled, a bootstrap
95% interval (rounds resampled, then the requests within them), and the min-max of the per-round
ratios (a round is one A, B, C triple, so each ratio compares phases next to each other). When
the interval holds 1.0, the difference is inside the noise of the run, and the script says so;
the no-scraper phases against themselves (even rounds / odd rounds) show the noise floor.
A figure, not a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SETTINGS = (("no scraper", 0.0), ("every 5 s", 5.0), ("every 0.5 s", 0.5))
MAX_TOKENS = 48


def scraper(url: str, interval: float) -> None:
    """The scraper process: says it is ready, then scrapes until killed, one line per scrape."""
    import httpx

    with httpx.Client(base_url=url, timeout=10) as client:
        print("ready", flush=True)
        if interval <= 0:
            while True:
                time.sleep(3600)
        next_at = time.monotonic() + random.uniform(0, interval)
        while True:
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += interval
            for path in ("/metrics", "/health"):
                with contextlib.suppress(httpx.HTTPError):
                    client.get(path)
            print("scrape", flush=True)


@dataclass
class Phase:
    setting: int
    started: float = 0.0
    ended: float = 0.0
    scrapes: int = 0
    ttft: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    failed: int = 0


def pct(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank (no interpolation: p99 of 150 samples is a real sample)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def drive(url: str, repeats: int, phase_s: float, clients: int) -> list[Phase]:
    from deploytool.server.client import EndpointClient

    order = [0, 1, 2, 2, 1, 0] * repeats
    phases = [Phase(setting=s) for s in order]
    current: list[Phase | None] = [None]
    stop = asyncio.Event()

    async def client_loop(client: EndpointClient, n: int) -> None:
        i = 0
        while not stop.is_set():
            phase = current[0]
            i += 1
            payload = {
                "model": "sim-model",
                "stream": True,
                "max_tokens": MAX_TOKENS,
                "ignore_eos": True,
                "messages": [{"role": "user", "content": f"client {n} request {i}: count to fifty"}],
            }
            result = await client.chat(payload, timeout=60)
            if phase is None:
                continue  # started while the scraper was being switched
            if result.ok and result.ttft is not None:
                phase.ttft.append(result.ttft)
                phase.latency.append(result.latency)
            else:
                phase.failed += 1

    async with EndpointClient(url, max_connections=clients) as client:
        workers = [asyncio.create_task(client_loop(client, n)) for n in range(clients)]
        await asyncio.sleep(min(5.0, phase_s))  # warm-up: connections open, the server's queue settled
        for phase in phases:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "--scrape",
                url,
                str(SETTINGS[phase.setting][1]),
                stdout=subprocess.PIPE,
            )
            assert proc.stdout is not None
            await proc.stdout.readline()  # "ready"
            phase.started = time.perf_counter()
            current[0] = phase
            await asyncio.sleep(phase_s)
            current[0] = None
            phase.ended = time.perf_counter()
            proc.kill()
            out, _ = await proc.communicate()
            phase.scrapes = out.decode().count("scrape")
        stop.set()
        await asyncio.gather(*workers)
    return phases


def of(round_: list[Phase], setting: int) -> Phase:
    return next(p for p in round_ if p.setting == setting)


def bootstrap(rounds: list[list[Phase]], setting: int, key: str, draws: int = 1000) -> tuple[float, float]:
    """95% interval of the pooled p99 ratio (setting / no scraper), from draws that resample the
    rounds and then the requests within each drawn phase: the noise between rounds (the machine's
    other load) and the noise of a p99 over a few hundred requests, both."""
    rng = random.Random(1)
    ratios = []
    for _ in range(draws):
        mine, base = [], []
        for r in rng.choices(rounds, k=len(rounds)):
            for phase, into in ((of(r, setting), mine), (of(r, 0), base)):
                values = getattr(phase, key)
                into.extend(rng.choices(values, k=len(values)))
        ratios.append(pct(mine, 0.99) / pct(base, 0.99))
    return pct(ratios, 0.025), pct(ratios, 0.975)


def report(phases: list[Phase], repeats: int, phase_s: float, clients: int) -> str:
    # A round: three phases in a row (A B C, then C B A).
    # (Only rounds whose three phases all finished a request: a phase shorter than a request has none.)
    rounds = [r for r in (phases[i : i + 3] for i in range(0, len(phases), 3)) if all(p.latency for p in r)]
    if not rounds:
        return "no round in which every phase finished a request: longer phases, please"
    lines = [
        f"{repeats} x (A B C C B A), {phase_s:g} s phases, {clients} closed-loop clients, "
        f"{MAX_TOKENS}-token streamed chats",
        f"{'setting':<12} {'req/s':>6} {'scrape GET/s':>12} {'n':>5} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'lat p50':>8} {'lat p99':>8}  {'TTFT p99 x [95%] (rounds)':>28}  {'lat p99 x [95%] (rounds)':>28}",
    ]
    by = {s: [p for r in rounds for p in r if p.setting == s] for s in range(len(SETTINGS))}
    base_ttft = [t for p in by[0] for t in p.ttft]
    base_lat = [t for p in by[0] for t in p.latency]
    verdicts = []
    for s, (name, _) in enumerate(SETTINGS):
        ttft = [t for p in by[s] for t in p.ttft]
        lat = [t for p in by[s] for t in p.latency]
        seconds = sum(p.ended - p.started for p in by[s])
        rps = len(lat) / seconds
        sps = sum(p.scrapes for p in by[s]) * 2 / seconds  # two GETs a scrape
        cells = []
        for mine, base, key in ((ttft, base_ttft, "ttft"), (lat, base_lat, "latency")):
            if s == 0:
                cells.append("")
                continue
            pooled = pct(mine, 0.99) / pct(base, 0.99)
            per_round = [
                pct(getattr(of(r, s), key), 0.99) / pct(getattr(of(r, 0), key), 0.99) for r in rounds
            ]
            lo, hi = bootstrap(rounds, s, key)
            cells.append(f"{pooled:.2f} [{lo:.2f}-{hi:.2f}] ({min(per_round):.2f}-{max(per_round):.2f})")
            what = "TTFT" if key == "ttft" else "latency"
            verdicts.append(
                f"{name}, {what} p99 x{pooled:.2f}: "
                + (
                    f"inside the spread (95% interval {lo:.2f}-{hi:.2f} holds 1.0): no difference shown"
                    if lo <= 1.0 <= hi
                    else f"outside the spread (95% interval {lo:.2f}-{hi:.2f}): {'slower' if lo > 1 else 'faster'}"
                )
            )
        failed = sum(p.failed for p in by[s])
        lines.append(
            f"{name:<12} {rps:6.2f} {sps:12.3f} {len(lat):5d} {pct(ttft, 0.5) * 1000:7.1f}ms "
            f"{pct(ttft, 0.99) * 1000:7.1f}ms {pct(lat, 0.5) * 1000:6.1f}ms {pct(lat, 0.99) * 1000:6.1f}ms"
            f"  {cells[0]:>28}  {cells[1]:>28}" + (f"  ({failed} failed)" if failed else "")
        )
    # The noise floor: no scraper against itself, the A phases of even rounds against those of odd ones.
    if len(rounds) >= 2:
        for key, what in (("ttft", "TTFT"), ("latency", "latency")):
            even = [t for r in rounds[0::2] for t in getattr(of(r, 0), key)]
            odd = [t for r in rounds[1::2] for t in getattr(of(r, 0), key)]
            verdicts.append(
                f"no scraper against itself (even rounds / odd rounds), {what} p99: "
                f"x{pct(even, 0.99) / pct(odd, 0.99):.2f}"
            )
    return "\n".join(lines + verdicts)


def main(repeats: int, phase_s: float, clients: int) -> None:
    from sim_process import SimProcess

    load_before = os.getloadavg()
    with SimProcess(
        decode_tps=100,
        schedule_latency_s=0.02,
        max_running_requests=8,
        enable_metrics=True,
        default_chat_template_kwargs='{"enable_thinking": false}',
    ) as sim:
        phases = asyncio.run(drive(sim.url, repeats, phase_s, clients))
    print(report(phases, repeats, phase_s, clients))

    def load(values: tuple[float, float, float]) -> str:
        return " ".join(f"{x:.2f}" for x in values)

    print(
        f"machine: {os.cpu_count()} cores, load average (1, 5, 15 min) {load(load_before)} at the start, "
        f"{load(os.getloadavg())} at the end"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--scrape":
        scraper(sys.argv[2], float(sys.argv[3]))
    else:
        args = sys.argv[1:]
        main(
            int(args[0]) if args else 3,
            float(args[1]) if len(args) > 1 else 10.0,
            int(args[2]) if len(args) > 2 else 8,
        )
