"""`deploytool tune`: what the command does, start to end (the CLI parses and prints).

prepare (space, flag check, plans) -> --dry-run stops here with the estimate -> measure the
survivors where they run -> decide -> report (table, frontier picture, results.json) -> the
winner as a profile that extends the original -> qualify on it before it is recommended
(summary.py words the outcome for a person).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import EXIT_INCONCLUSIVE, UsageError
from ..files import write_atomic, write_json
from ..memory.profile_plan import resolve_card
from ..memory.releases import rules_release
from ..profiles import Profile, ProfileStore
from . import report
from .local import LocalServer
from .machines import machine_id, machines_note
from .measure import profile_key
from .request import TuneRequest
from .search import Search, describe, estimate_s, finish, next_visit, prepare, replay_journal, run_search
from .space import TuneSpace, read_space, slo_over
from .summary import summary_lines

if TYPE_CHECKING:
    from ..host.slots import Slot

EXIT_OK, EXIT_NONE_QUALIFIES = 0, 1


@dataclasses.dataclass
class TuneOutcome:
    data: dict[str, Any]
    exit_code: int
    summary: list[str]


@dataclasses.dataclass
class _Prepared:
    """What a search has before its first start: the profile, the plans, the report's header."""

    store: ProfileStore
    profile: Profile
    space: TuneSpace
    search: Search
    header: dict[str, Any]
    card: Any


def tune(request: TuneRequest, *, progress: Callable[[str], None] = lambda line: None) -> TuneOutcome:
    if not request.dry_run:
        _refuse_on_described_host(request.slot)
    prepared = _prepare(request)
    if request.dry_run:
        return _dry_run(prepared.search, prepared.header)
    return _search_and_decide(request, prepared, progress)


def _refuse_on_described_host(slot: Slot | None) -> None:
    if slot is not None and not slot.is_cpu:
        from ..host.nvml import refuse_on_described_host

        # before the flag check and the plans: minutes of work for a search that cannot run here
        refuse_on_described_host([slot.name], "tune")


def _prepare(request: TuneRequest) -> _Prepared:
    """The profile, its space and the plans of every candidate (the journal's starts read back
    when the search goes on); nothing started."""
    store = ProfileStore(request.profile_dirs)
    profile = store.get(request.profile_name)
    if profile.abstract:
        raise UsageError(f"profile {request.profile_name!r} is abstract: tune one that extends it")
    space = read_space(profile, request.space_file, workload=request.workload)
    slo_targets = slo_over(space, request.slo)
    report_dir = _report_dir(request, profile)
    card = _card(profile, request.card, request.gpu)
    search = prepare(profile, space, slo_targets, report_dir, card=card, local=request.local)
    if request.resume:
        search.notes.append(f"resumed: {replay_journal(search)} starts read back from the journal")
    header = _header(profile, search, request.where, card)
    return _Prepared(store, profile, space, search, header, card)


def _report_dir(request: TuneRequest, profile: Profile) -> Path:
    report_dir = request.report_dir
    if report_dir is None:
        from ..checks.reports import default_report_dir

        report_dir = default_report_dir(f"tune-{profile.name}")
    report_dir = Path(report_dir)
    if (report_dir / "journal.jsonl").is_file() and not request.resume and not request.dry_run:
        raise UsageError(
            f"{report_dir} holds a previous search's journal",
            hint="--resume to go on with it, or --report DIR for a new search",
        )
    return report_dir


def _search_and_decide(
    request: TuneRequest, prepared: _Prepared, progress: Callable[[str], None]
) -> TuneOutcome:
    """Measure the candidates where they run, decide, write the winner's profile and qualify on
    it; the report either way."""
    profile, search, header = prepared.profile, prepared.search, prepared.header
    health_s = float(profile.health.budget_seconds())
    search.machine = machine_id(profile, request.slot)
    profile_key(profile)  # a key that cannot be read stops the search before the first start, not at it
    with _servers(request.slot, request.profile_dirs, request.port_range) as make_server:
        _run(request, prepared, make_server, progress, health_s)
        winner, ties, st = finish(search)
        inconclusive = search.stopped_by_budget and next_visit(search) is not None
        header["inconclusive"] = inconclusive
        header["resume"] = _resume(request, profile, search)
        header["noise"] = st.noise.as_dict()
        header["confidence"] = prepared.space.confidence
        if inconclusive:
            winner, ties = None, []
        written: Path | None = None
        verdict: dict[str, Any] = {}
        if _beats_base(search, winner, ties):
            written, verdict = _winner_profile(
                prepared.store,
                profile,
                search,
                winner,
                request.name,
                prepared.card,
                request.qualify_winner,
                request.profile_dirs,
                health_s,
                progress,
                make_server,
            )
    data = _write(search, header, winner, ties, written, verdict)
    return TuneOutcome(data=data, exit_code=_exit_code(data), summary=summary_lines(data))


def _run(
    request: TuneRequest,
    prepared: _Prepared,
    make_server: Callable[[Profile, Path], Any],
    progress: Callable[[str], None],
    health_s: float,
) -> None:
    """The race; on Ctrl-C the table so far and how to go on with it."""
    search = prepared.search
    try:
        run_search(search, make_server, budget_s=request.budget, progress=progress, health_s=health_s)
    except KeyboardInterrupt:
        finish(search)  # the verdicts and estimates so far, for the table
        _write(search, prepared.header, None, [], None, {})
        progress(
            f"stopped: every candidate's server is stopped; the journal is {search.journal}; "
            f"go on with: {resume_command(prepared.profile.name, request.where, search.report_dir)}"
        )
        raise


def _resume(request: TuneRequest, profile: Profile, search: Search) -> str:
    ports = request.port_range
    where = request.where + (f" --port-range {ports[0]}-{ports[1]}" if ports else "")
    return resume_command(profile.name, where, search.report_dir)


def _beats_base(search: Search, winner: Any, ties: list[Any]) -> bool:
    """A winner other than the profile's own launch, and not tied with it."""
    base = next((r for r in search.results if r.id == "base"), None)
    return winner is not None and winner.id != "base" and not (base is not None and base in ties)


def resume_command(profile: str, where: str, report_dir: Path) -> str:
    return f"deploytool tune --profile {profile} {where} --report {report_dir} --resume"


@contextlib.contextmanager
def _servers(
    slot: Slot | None, profiles_dirs: list[Path] | None, ports: tuple[int, int] | None = None
) -> Iterator[Callable[[Profile, Path], Any]]:
    """What starts a candidate: a local process, or a release of a Docker slot (a card's, or a
    CPU slot of the reference runtime) whose serving release is brought back when the search
    ends, however it ends."""
    if slot is None:
        yield lambda p, log: LocalServer(p, log, ports=ports)
        return
    from .slot import SlotServer, slot_session

    with slot_session(slot, profiles_dirs) as session:
        yield lambda p, log: SlotServer(session, p, log)


def _card(profile: Profile, card: str | None, gpu: str | None) -> Any:
    if not card and not gpu and not profile.match.gpu_name:
        return None
    return resolve_card(profile, gpu=gpu, card=card)


def _header(profile: Profile, search: Search, where: str, card: Any) -> dict[str, Any]:
    import datetime as dt

    return {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "profile": profile.name,
        "recipe": profile.image.recipe,
        "runtime_version": profile.image.runtime_version,
        "where": where,
        "card": getattr(card, "name", None),
        "slo": search.slo.model_dump(),
        "space": search.space.model_dump(mode="json"),
        "report_dir": str(search.report_dir),
    }


def _dry_run(search: Search, header: dict[str, Any]) -> TuneOutcome:
    data = {
        **header,
        "dry_run": True,
        **describe(search),
        "estimate_s": round(estimate_s(search), 1),
        "counts": _counts(search),
    }
    return TuneOutcome(data=data, exit_code=EXIT_OK, summary=summary_lines(data))


def _counts(search: Search) -> dict[str, Any]:
    starts = [s for r in search.results for s in r.starts]
    return {
        "planned": len(search.results),
        "refused": sum(1 for r in search.results if r.refused),
        "pruned": sum(1 for r in search.results if r.planned.pruned),
        "runnable": len(search.runnable()),
        "started": len(starts),
        "failed_starts": sum(1 for s in starts if s.error),
        "measured": sum(1 for r in search.results if r.passes),
        "not_started": sum(1 for r in search.results if r.runnable and not r.starts),
        "passes": sum(len(r.passes) for r in search.results),
        "start_s": round(sum(s.startup_s for s in starts), 1),
        "measure_s": round(sum(p.measure_s for r in search.results for p in r.passes), 1),
        # the rest of every visit: the stop, the port's release, the bench's warm-up and checks
        "stop_s": round(sum(s.stop_s or 0.0 for s in starts), 1),
        "visit_s": round(sum(s.visit_s or s.startup_s for s in starts), 1),
    }


def _winner_profile(
    store: ProfileStore,
    profile: Profile,
    search: Search,
    winner: Any,
    name: str | None,
    card: Any,
    qualify_winner: bool,
    profiles_dirs: list[Path] | None,
    health_s: float,
    progress: Callable[[str], None],
    make_server: Callable[[Profile, Path], Any],
) -> tuple[Path, dict[str, Any]]:
    name = name or f"{profile.name}-tuned"
    base = next((r for r in search.results if r.id == "base"), None)
    evidence = {
        "evidence": str(search.report_dir / "results.json"),
        "image": f"recipe {profile.image.recipe}"
        + (f", runtime {profile.image.runtime_version}" if profile.image.runtime_version else ""),
        "card": getattr(card, "name", None) or ("CPU (reference runtime)" if profile.is_simulator else None),
    }
    path = report.write_winner(
        report.winner_profile(profile, winner, base, name=name, evidence=evidence),
        search.report_dir / f"{name}.yaml",
    )
    # the file must load as a profile next to the original (extends resolves through the store)
    ProfileStore([search.report_dir, *(profiles_dirs or [])]).get(name)
    if not qualify_winner:
        return path, {"ran": False, "why": "--no-qualify"}
    return path, _qualify(winner.planned.candidate.profile, search, health_s, progress, make_server)


def _qualify(
    profile: Profile,
    search: Search,
    health_s: float,
    progress: Callable[[str], None],
    make_server: Callable[[Profile, Path], Any],
) -> dict[str, Any]:
    """qualify on the winner's launch: a faster launch that answers wrong is not recommended."""
    from ..checks.targets import Target
    from ..qualify.runner import run_qualification

    suites = list(search.space.qualify)
    progress(f"qualify on the winner ({', '.join(suites)})")
    server = make_server(profile, search.report_dir / "logs" / "winner-qualify.log")
    try:
        server.start()
        why = server.wait_ready(health_s)
        if why:
            return {"ran": True, "passed": False, "why": f"the winner did not start again: {why}"}
        result = run_qualification(
            Target(url=server.url, profile=server.served_profile(), api_key=profile_key(profile)),
            suites=suites,
            report_dir=search.report_dir / "qualify-winner",
        )
    finally:
        server.stop()
    return {
        "ran": True,
        "passed": result.passed,
        "suites": suites,
        "report": str(search.report_dir / "qualify-winner" / "results.json"),
    }


def _write(
    search: Search,
    header: dict[str, Any],
    winner: Any,
    ties: list[Any],
    written: Path | None,
    verdict: dict[str, Any],
) -> dict[str, Any]:
    search.report_dir.mkdir(parents=True, exist_ok=True)
    picture = report.write_frontier_png(
        search.results,
        search.report_dir / "frontier.png",
        f"{header['profile']}: per-GPU against per-user output tok/s",
        search.slo,
    )
    closest = []
    if winner is None:
        tried = [r for r in search.results if r.passes]
        closest = [r.id for r in sorted(tried, key=lambda r: r.closest_excess() or float("inf"))[:3]]
    # only a winner qualify passed is recommended: one whose qualify was skipped (--no-qualify) is
    # written and reported as measured, never as checked
    recommended = written is not None and verdict.get("passed") is True
    base = next((r for r in search.results if r.id == "base"), None)
    ratio = None
    if winner is not None and base is not None and winner.estimate and base.estimate and winner is not base:
        from .estimate import pooled_noise, ratio_interval

        noise = pooled_noise(search.results, search.space.start_noise)
        ratio = [
            round(x, 4)
            for x in ratio_interval(winner.estimate, base.estimate, noise, search.space.confidence)
        ]
    data = {
        "schema": "deploytool.tune/1",
        "started_at": header.get("started_at"),
        **header,
        "dry_run": False,
        **describe(search),
        "counts": _counts(search),
        "winner": winner.id if winner else None,
        "ties": [t.id for t in ties],
        "winner_flags": (
            {**winner.planned.candidate.changes, **winner.planned.candidate.derived} if winner else None
        ),
        "winner_estimate": winner.estimate.as_dict() if winner is not None and winner.estimate else None,
        "ratio_to_base": ratio,
        "beyond_spread": bool(winner is not None and not ties),
        "closest": closest,
        "winner_profile": str(written) if written else None,
        "qualify": verdict,
        "recommended": recommended,
        "frontier_png": str(picture) if picture else None,
        "runtime_note": runtime_note(header, search.results),
        "machine_note": machines_note(search.results),
    }
    md = report.markdown(
        search.results,
        f"# tune: {header['profile']} ({header['where']}), SLO "
        f"{search.slo.describe()}"
        + "".join(f"\n\n{data[k]}" for k in ("runtime_note", "machine_note") if data[k]),
    )
    write_atomic(search.report_dir / "report.md", md)
    write_json(search.report_dir / "results.json", data)
    return data


def runtime_note(header: dict[str, Any], results: list[Any]) -> str | None:
    """What to say when the servers ran another SGLang than the profile pins: every plan
    followed the pinned release's rules, so the plan / server columns compare across releases."""
    if header.get("recipe") != "sglang":
        return None
    pinned = header.get("runtime_version")
    seen = sorted({v for r in results if (v := r.reported().get("runtime_version")) and v != pinned})
    if not seen:
        return None
    release, _ = rules_release(pinned)
    return (
        f"the servers reported SGLang {', '.join(seen)} while the profile pins {pinned or 'no release'}: "
        f"every candidate was planned by {release}'s rules, so the plan / server columns compare a plan "
        "for one release with another's start; pin the release that runs (image.runtime_version)"
    )


def _exit_code(data: dict[str, Any]) -> int:
    if data.get("inconclusive"):
        return EXIT_INCONCLUSIVE
    if data["winner"] is None:
        return EXIT_NONE_QUALIFIES
    if data["winner_profile"] and data["qualify"].get("ran") and not data["recommended"]:
        return EXIT_NONE_QUALIFIES
    return EXIT_OK
