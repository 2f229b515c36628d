"""The search: space -> one batch flag check -> plans (pruned without a start) -> the race
(tune/race.py): candidates started in the order of the prediction, passes added on a live
server while it races, a candidate dropped once its interval says it cannot win, the winner
declared when its interval clears every other's -> the winner, its ties, the closest when none
meets the SLO.

The schedule is a pure function of what was measured (`next_visit`), so the journal — one JSON
line per start and per pass, written at the end of each visit — is all `--resume` needs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import FieldError, UsageError
from ..memory.cards import Card
from ..profiles import Profile
from .check import FlagReport, check_candidates
from .measure import Pass, measure
from .prune import plan_candidates
from .race import decide, visits_left, wants_more_passes
from .race import next_visit as race_next
from .results import CandidateResult, Start
from .space import Slo, TuneSpace, candidates

Progress = Callable[[str], None]


class Server(Protocol):
    url: str

    def start(self) -> None: ...
    def wait_ready(self, timeout_s: float) -> str | None: ...
    def stop(self) -> None: ...
    def log_tail(self, lines: int = 3) -> str: ...
    def served_profile(self) -> Profile: ...


@dataclass
class Search:
    profile: Profile
    space: TuneSpace
    slo: Slo
    report_dir: Path
    results: list[CandidateResult] = field(default_factory=list)
    flags: FlagReport | None = None
    plan_note: str | None = None
    stopped_by_budget: bool = False
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    machine: str | None = None  # where this run's starts happen (tune/machines.py)

    @property
    def journal(self) -> Path:
        return self.report_dir / "journal.jsonl"

    def by_id(self, cid: str) -> CandidateResult:
        return next(r for r in self.results if r.id == cid)

    def runnable(self) -> list[str]:
        return [r.id for r in self.results if r.runnable]


def prepare(
    profile: Profile, space: TuneSpace, slo: Slo, report_dir: Path, *, card: Card | None, local: bool
) -> Search:
    """Space, flag check, plans: everything before the first start (and all of --dry-run)."""
    cands = candidates(profile, space)
    flags = check_candidates(profile, cands, local=local)
    planned, note = plan_candidates(profile, cands, space, card)
    search = Search(profile, space, slo, report_dir, flags=flags, plan_note=note)
    for p in planned:
        search.results.append(CandidateResult(planned=p, refused=flags.refused.get(p.candidate.id, [])))
    if flags.refused:
        # a value of the space the runtime refuses is a mistake in the space, not a slow launch
        problems = sorted({p for found in flags.refused.values() for p in found})
        raise UsageError(
            f"{flags.where} refused {len(flags.refused)} of {len(cands)} candidates: "
            + "; ".join(problems[:5])
            + ("; ..." if len(problems) > 5 else ""),
            hint="fix the names and values under tune.flags (the runtime's own flag names); nothing was started",
        )
    return search


def next_visit(search: Search) -> str | None:
    """The next candidate to start, or None when the search is done."""
    return race_next(search.results, search.space)


def per_visit_s(search: Search) -> float:
    """A visit's time, start to stop, from the visits measured; else a guess from the profile."""
    walls = [s.visit_s for r in search.results for s in r.starts if not s.error and s.visit_s is not None]
    if walls:
        return sum(walls) / len(walls)
    visits = [s for r in search.results for s in r.starts if not s.error]
    passes = [p for r in search.results for p in r.passes]
    if visits and passes:  # a journal written before visits were timed whole
        return sum(s.startup_s for s in visits) / len(visits) + sum(p.measure_s for p in passes) / len(visits)
    return _guess_start_s(search.profile) + _guess_measure_s(search.space)


def estimate_s(search: Search) -> float:
    """What is left: the visits the race would still make as it stands (tune/race.py), each as
    long as the visits so far took, start to stop."""
    return visits_left(search.results, search.space) * per_visit_s(search)


def run_search(
    search: Search,
    make_server: Callable[[Profile, Path], Server],
    *,
    budget_s: float | None,
    progress: Progress,
    health_s: float,
) -> None:
    """Visit candidates until the schedule is done, the budget would be passed, or Ctrl-C.
    Every server is stopped before this returns or raises."""
    started = time.monotonic()
    if not search.journal.is_file():
        search.report_dir.mkdir(parents=True, exist_ok=True)
        search.journal.write_text(
            json.dumps(
                {
                    "kind": "search",
                    "profile": search.profile.name,
                    "candidates": [r.id for r in search.results],
                }
            )
            + "\n"
        )
    while (cid := next_visit(search)) is not None:
        if budget_s is not None:
            left = budget_s - (time.monotonic() - started)
            per_visit = per_visit_s(search)
            if left < per_visit:
                search.stopped_by_budget = True
                progress(
                    f"budget: {left:.0f} s left, a visit takes about {per_visit:.0f} s: stopping with what was learnt"
                )
                return
        result = search.by_id(cid)
        visit = len(result.starts)
        done = sum(len(r.starts) for r in search.results)
        progress(
            f"[{done} started, ~{visits_left(search.results, search.space)} left, ~{estimate_s(search) / 60:.1f} min] "
            f"{cid} ({result.planned.candidate.label()}): start {visit + 1}"
        )
        log = search.report_dir / "logs" / f"{cid}-start{visit + 1}.log"
        server = make_server(result.planned.candidate.profile, log)
        t0 = time.monotonic()
        try:
            server.start()
            progress(f"{cid}: starting on {server.url} (log {log})")
            why = server.wait_ready(health_s)
            start = Start(
                visit=visit,
                startup_s=round(time.monotonic() - t0, 3),
                error=why,
                log=str(log),
                url=server.url,
                machine=search.machine,
            )
            passes: list[Pass] = []
            if why is None:
                passes = _measure_visit(search, result, server, visit, start.startup_s, progress)
        except KeyboardInterrupt:
            search.interrupted = True
            raise
        finally:
            t_stop = time.monotonic()
            server.stop()
        start.stop_s = round(time.monotonic() - t_stop, 3)
        start.visit_s = round(time.monotonic() - t0, 3)
        _record(search, result, start, passes)
        if start.error:
            progress(f"{cid}: failed to start ({start.error}); the search goes on")
        else:
            _, _, st = decide(search.results, search.space)
            e = st.estimates.get(cid)
            progress(
                f"{cid}: {e.mean:.1f} tok/s/GPU [{e.low:.1f}, {e.high:.1f}] over {e.passes} passes, "
                f"{e.starts} starts; leader {st.leader}"
                if e
                else f"{cid}: no point inside the SLO"
            )


def _measure_visit(
    search: Search, result: CandidateResult, server: Server, visit: int, startup_s: float, progress: Progress
) -> list[Pass]:
    """The space's passes, then one more at a time while this candidate still races (a pass
    costs seconds on the live server, a restart minutes); the passes join the candidate's as
    they are measured, so the race sees them, and the journal gets them with the visit."""
    profile, cid = result.planned.candidate.profile, result.id
    passes, _ = measure(server.url, profile, search.space, search.slo, candidate=cid, visit=visit)
    result.passes.extend(passes)
    while wants_more_passes(search.results, search.space, cid, len(passes)):
        more, _ = measure(
            server.url,
            profile,
            search.space.model_copy(update={"repeats": 1}),
            search.slo,
            candidate=cid,
            visit=visit,
            warm=True,
        )
        for p in more:
            p.repeat = len(passes)
            passes.append(p)
            result.passes.append(p)
        progress(f"{cid}: still racing, pass {len(passes)} on the live server")
    for p in passes:
        p.startup_s = startup_s
    return passes


def finish(search: Search) -> tuple[CandidateResult | None, list[CandidateResult], Any]:
    return decide(search.results, search.space)


def _record(search: Search, result: CandidateResult, start: Start, passes: list[Pass]) -> None:
    result.starts.append(start)
    result.passes.extend(p for p in passes if p not in result.passes)
    search.report_dir.mkdir(parents=True, exist_ok=True)
    with search.journal.open("a") as out:
        out.write(json.dumps({"kind": "start", "candidate": result.id, **vars(start)}) + "\n")
        for p in passes:
            out.write(json.dumps({"kind": "pass", **p.as_dict()}) + "\n")


def replay_journal(search: Search) -> int:
    """--resume: the starts and passes a previous run journalled, put back; returns how many
    starts. A journal line for a candidate this space does not make is refused."""
    if not search.journal.is_file():
        raise FieldError(
            "resume", f"no journal at {search.journal}", hint="give the --report DIR of the run to resume"
        )
    count = 0
    for n, line in enumerate(search.journal.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if entry.get("kind") == "search":
                if (
                    entry["candidates"] != [r.id for r in search.results]
                    or entry["profile"] != search.profile.name
                ):
                    raise KeyError("another space")
                continue
            result = search.by_id(entry["candidate"])
            # a field this release does not know (a newer deploytool's journal) is refused here,
            # with the line's number, rather than as a traceback
            if entry.pop("kind") == "start":
                entry.pop("candidate")
                result.starts.append(Start(**entry))
                count += 1
            else:
                result.passes.append(Pass.from_dict(entry))
        except (json.JSONDecodeError, KeyError, StopIteration, AttributeError, TypeError):
            raise FieldError(
                "resume",
                f"{search.journal}:{n} is not a journal line of this space",
                hint="resume with the same profile and space, or start afresh in a new --report DIR",
            ) from None
    return count


def _seconds(profile: Profile, flag: str, default: float) -> float:
    """A reference runtime's timing flag as seconds (unset, empty or a list: the guess goes without it)."""
    value = profile.server.args.get(flag, default)
    return 0.0 if isinstance(value, list) else float(value or 0)


def _guess_start_s(profile: Profile) -> float:
    if profile.is_simulator:
        return _seconds(profile, "startup-seconds", 2.0) + _seconds(profile, "load-seconds", 0) + 1.0
    return 300.0  # a real server's start is minutes: weights, graphs; measured starts replace this


def _guess_measure_s(space: TuneSpace, user_tps: float = 50.0) -> float:
    per_pass = sum(space.requests_per_level * space.output_tokens / user_tps for _ in space.load) + 5.0
    return per_pass * space.repeats


def describe(search: Search) -> dict[str, Any]:
    return {
        "flags_check": search.flags.as_dict() if search.flags else None,
        "plan_note": search.plan_note,
        "candidates": [r.as_dict() for r in search.results],
        "notes": search.notes,
        "stopped_by_budget": search.stopped_by_budget,
        "interrupted": search.interrupted,
    }
