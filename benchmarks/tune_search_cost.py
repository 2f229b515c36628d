"""What tune's race costs against the exhaustive grid, and how often it is right.

    nice .venv/bin/python benchmarks/tune_search_cost.py [SEARCHES] [--real N] [--seed-base B]

For each of three spaces of the reference runtime whose optimum docs/sim.md's rules fix, SEARCHES
searches (20 by default) with seeded noise. Each search is deploytool's own schedule
(tune/race.py: `next_visit`, `wants_more_passes`, `decide`) over deploytool's own candidates
and plans (tune/space.py, tune/prune.py on an H200 with the test checkpoint's config), fed by a
*modelled* measurement source instead of live servers: a pass's score is the throughput the sim's
rules give (src/deploytool/sim/launch_rules.py, evaluated with the sim's own settings parser),
times a per-start offset (restart noise, sigma_b) and a per-pass factor (sigma_w), both
log-normal and seeded. 60 real searches of live processes would take hours on this shared
machine; `--real N` also runs N real `deploytool tune --local` searches of the smallest space on
live reference-runtime processes and prints their winners. `--seed-base B` (0 by default) shifts
every search's seed by B, for a second set of noise draws the race was not tuned on.

Beside each search, the exhaustive grid with the same evidence per candidate as tune's winner
(every candidate started as often, and measured as many passes, with noise from the same
model), and its pick. Cost: starts, passes, and GPU-minutes modelled with the H200 figures of
docs/measured/tune-h200.md (a warm start 89 s, the median; a pass 5.7 s: 172 s over 30 passes;
a stop 10 s, the port's release). A figure, not a test.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))  # the tune tests' profile writer

import tune_helpers  # noqa: E402

from deploytool.memory.cards import card_from_table  # noqa: E402
from deploytool.profiles import ProfileStore, args_to_argv  # noqa: E402
from deploytool.sim import launch_rules  # noqa: E402
from deploytool.sim.settings import SimSettings  # noqa: E402
from deploytool.tune.measure import LoadPoint, Pass  # noqa: E402
from deploytool.tune.prune import plan_candidates  # noqa: E402
from deploytool.tune.race import decide, next_visit, wants_more_passes  # noqa: E402
from deploytool.tune.results import CandidateResult, Start  # noqa: E402
from deploytool.tune.space import TuneSpace, candidates  # noqa: E402

START_S, PASS_S, STOP_S = 89.0, 172.0 / 30, 10.0
SIGMA_W, SIGMA_B = 0.03, 0.02  # pass-to-pass and start-to-start noise of the model (log scale)

SPACES = {
    # the space: running limit x draft steps x fraction; 0.4 leaves no KV pool (pruned)
    "limit-x-draft-x-fraction": (
        {"spec-accept-rate": 0.7, "speculative-algorithm": "EAGLE"},
        {
            "flags": {
                "max-running-requests": [2, 4, 8, 16, 32],
                "speculative-num-steps": [1, 2, 3],
                "mem-fraction-static": [0.4, 0.85],
            },
            "derived": ["cuda-graph-max-bs", "speculative-num-draft-tokens"],
            "load": [16],
        },
    ),
    # graphs: the running limit against the graphs' batch limit and graphs off
    "limit-x-graphs": (
        {"eager-decode-factor": 0.6},
        {
            "flags": {
                "max-running-requests": [4, 8, 16, 24],
                "cuda-graph-max-bs": [4, 8, 16, 24],
                "disable-cuda-graph": [False, True],
            },
            "load": [24],
        },
    ),
    # a close call: draft steps at 8 running, the best two 4.3% apart by the rules
    "close-draft": (
        {
            "spec-accept-rate": 0.6,
            "spec-draft-cost": 0.05,
            "spec-verify-cost": 0.02,
            "speculative-algorithm": "EAGLE",
        },
        {
            "flags": {"max-running-requests": [4, 8], "speculative-num-steps": [1, 2, 3, 4]},
            "derived": ["cuda-graph-max-bs", "speculative-num-draft-tokens"],
            "load": [8],
        },
    ),
}


def write_profile(folder: Path, extra: dict, tune: dict) -> Path:
    """The tune tests' reference-runtime profile (tests/tune_helpers.py) as the benchmark searches
    it: no eager-decode factor, the runtime's own thinking default, three rounds."""
    return tune_helpers.write_profile(
        folder,
        tune={"rounds": 3, **tune},
        name="bench-sim",
        args=extra,
        speed={"max-running-requests": 2, "decode-tps": 50},
        chat_template_kwargs=None,
    )


def truth(args: dict, load: int) -> float | None:
    """Output tok/s by the sim's rules at `load` concurrent requests; None: it cannot start."""
    argv = args_to_argv({k: v for k, v in args.items() if v is not False})
    s = SimSettings.from_env_and_args(argv, env={})
    launch_rules.resolve(s)
    if launch_rules.start_failure(s):
        return None
    running = max(1, min(load, s.max_running_requests))
    return running * s.decode_tps * launch_rules.step_factor(s, running)


@dataclass
class Outcome:
    right: bool
    beyond: bool
    wrong_beyond: bool
    starts: int
    passes: int
    oom: int
    grid_starts: int
    grid_passes: int
    grid_right: bool


def _pass(cid: str, visit: int, repeat: int, score: float) -> Pass:
    return Pass(cid, visit, repeat, [LoadPoint(8, score, 50.0, 1, 2, 3, 4, 8, 0, 1.0, 0.5)], score)


def search_once(results_proto: list, true: dict, space: TuneSpace, rng: random.Random) -> Outcome:
    results = [CandidateResult(planned=r.planned, refused=r.refused) for r in results_proto]
    by_id = {r.id: r for r in results}
    oom = 0
    while (cid := next_visit(results, space)) is not None:
        r = by_id[cid]
        visit = len(r.starts)
        if true[cid] is None:
            oom += 1
            r.starts.append(Start(visit=visit, startup_s=START_S, error="CUDA out of memory"))
            continue
        offset = rng.gauss(0, SIGMA_B)
        n = 0
        while n < space.repeats or wants_more_passes(results, space, cid, n):
            r.passes.append(_pass(cid, visit, n, true[cid] * math.exp(offset + rng.gauss(0, SIGMA_W))))
            n += 1
        r.starts.append(Start(visit=visit, startup_s=START_S))
    winner, ties, _ = decide(results, space)
    best = max(v for v in true.values() if v is not None)
    best_ids = {c for c, v in true.items() if v is not None and v >= best * (1 - 1e-9)}
    declared = {winner.id, *(t.id for t in ties)} if winner else set()
    right = bool(declared & best_ids)
    beyond = winner is not None and not ties
    starts = sum(len(r.starts) for r in results)
    passes = sum(len(r.passes) for r in results)
    # the grid: every runnable candidate with the winner's evidence, its pick the highest mean
    k = len(winner.starts) if winner else 1
    per = max(1, round(len(winner.passes) / k)) if winner else space.repeats
    runnable = [r.id for r in results if r.runnable]
    means = {}
    for cid in runnable:
        if true[cid] is None:
            continue
        logs = [
            math.log(true[cid]) + o + rng.gauss(0, SIGMA_W)
            for o in (rng.gauss(0, SIGMA_B) for _ in range(k))
            for _ in range(per)
        ]
        means[cid] = sum(logs) / len(logs)
    grid_pick = max(means, key=means.get)
    return Outcome(
        right,
        beyond,
        beyond and not right,
        starts,
        passes,
        oom,
        len(runnable) * k,
        len(runnable) * k * per,
        grid_pick in best_ids,
    )


def minutes(starts: int, passes: int) -> float:
    return (starts * (START_S + STOP_S) + passes * PASS_S) / 60


def run_space(
    name: str, extra: dict, tune: dict, searches: int, slack: float | None = 0.3, seed_base: int = 0
) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_profile(Path(tmp), extra, tune)
        profile = ProfileStore([folder]).get("bench-sim")
        space = TuneSpace.model_validate({**profile.tune, "predict_slack": slack})
        cands = candidates(profile, space)
        planned, _ = plan_candidates(profile, cands, space, card_from_table("h200"))
    protos = [CandidateResult(planned=p) for p in planned]
    load = max(space.load)
    true = {p.candidate.id: truth(p.candidate.profile.server.args, load) for p in planned if p.pruned is None}
    ranked = sorted((v, c) for c, v in true.items() if v is not None)
    gap = ranked[-1][0] / ranked[-2][0] - 1 if len(ranked) > 1 else float("inf")
    outs = [
        search_once(protos, true, space, random.Random(seed_base + 1000 * i + len(name)))
        for i in range(searches)
    ]
    n = len(outs)
    beyond = sum(o.beyond for o in outs)
    tune_min = sum(minutes(o.starts, o.passes) for o in outs) / n
    grid_min = sum(minutes(o.grid_starts, o.grid_passes) for o in outs) / n
    return {
        "space": name,
        "planned": len(planned),
        "pruned": sum(1 for p in planned if p.pruned),
        "runnable": len(true),
        "best": ranked[-1][1],
        "gap_best_two_pct": round(100 * gap, 2),
        "searches": n,
        "right": sum(o.right for o in outs),
        "beyond_spread": beyond,
        "wrong_beyond_spread": sum(o.wrong_beyond for o in outs),
        "tune_starts_mean": round(sum(o.starts for o in outs) / n, 2),
        "tune_passes_mean": round(sum(o.passes for o in outs) / n, 2),
        "oom_starts": sum(o.oom for o in outs),
        "grid_starts_mean": round(sum(o.grid_starts for o in outs) / n, 2),
        "grid_right": sum(o.grid_right for o in outs),
        "tune_gpu_min": round(tune_min, 1),
        "grid_gpu_min": round(grid_min, 1),
        "share_of_grid": round(tune_min / grid_min, 3),
    }


def real_searches(count: int) -> list[dict]:
    """`deploytool tune --local` on live reference-runtime processes, the close space."""
    out = []
    extra, tune = SPACES["close-draft"]
    for i in range(count):
        with tempfile.TemporaryDirectory() as tmp:
            folder = write_profile(Path(tmp) / "profiles", extra, {**tune, "output_tokens": 64})
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "deploytool",
                    "tune",
                    "--profile",
                    "bench-sim",
                    "--profiles-dir",
                    str(folder),
                    "--local",
                    "--no-qualify",
                    "--json",
                    "--report",
                    str(Path(tmp) / "r"),
                ],
                capture_output=True,
                text=True,
                timeout=1800,
                cwd=ROOT,
                env={**__import__("os").environ, "DEPLOYTOOL_HOME": str(Path(tmp) / "home")},
            )
            try:
                data = json.loads(done.stdout)
            except ValueError:
                out.append({"search": i, "exit": done.returncode, "error": done.stderr[-300:]})
                continue
            out.append(
                {
                    "search": i,
                    "exit": done.returncode,
                    "winner": data.get("winner"),
                    "ties": data.get("ties"),
                    "starts": data["counts"]["started"],
                    "passes": data["counts"]["passes"],
                    "runnable": data["counts"]["runnable"],
                    "ratio_to_base": data.get("ratio_to_base"),
                    "noise": data.get("noise"),
                }
            )
    return out


def main() -> None:
    args = sys.argv[1:]
    real = 0
    if "--real" in args:
        i = args.index("--real")
        real = int(args[i + 1])
        del args[i : i + 2]
    seed_base = 0
    if "--seed-base" in args:
        i = args.index("--seed-base")
        seed_base = int(args[i + 1])
        del args[i : i + 2]
    searches = int(args[0]) if args else 20
    print(
        f"seed base {seed_base}; model: pass noise {SIGMA_W:.0%}, start noise {SIGMA_B:.0%} (log-normal, seeded); a start "
        f"{START_S:.0f} s + stop {STOP_S:.0f} s, a pass {PASS_S:.1f} s (docs/measured/tune-h200.md)"
    )
    rows = [
        run_space(name, extra, tune, searches, seed_base=seed_base) for name, (extra, tune) in SPACES.items()
    ]
    for row in rows:
        print(json.dumps(row))
    total = sum(r["searches"] for r in rows)
    right = sum(r["right"] for r in rows)
    beyond = sum(r["beyond_spread"] for r in rows)
    wrong = sum(r["wrong_beyond_spread"] for r in rows)
    share = sum(r["tune_gpu_min"] for r in rows) / sum(r["grid_gpu_min"] for r in rows)
    print(
        f"all spaces: right {right}/{total} ({right / total:.0%}); winner beyond the spread {beyond}, "
        f"wrong {wrong} ({wrong / max(1, beyond):.0%}); GPU-minutes {share:.1%} of the grid's; "
        f"out-of-memory starts {sum(r['oom_starts'] for r in rows)}"
    )
    # the prediction's slack trades starts for safety: a real runtime's prediction is rougher
    for slack in (0.15, 0.6, None):
        rows = [
            run_space(name, extra, tune, searches, slack, seed_base) for name, (extra, tune) in SPACES.items()
        ]
        total = sum(r["searches"] for r in rows)
        share = sum(r["tune_gpu_min"] for r in rows) / sum(r["grid_gpu_min"] for r in rows)
        print(
            f"predict_slack {slack}: right {sum(r['right'] for r in rows)}/{total}, wrong beyond the spread "
            f"{sum(r['wrong_beyond_spread'] for r in rows)}/{sum(r['beyond_spread'] for r in rows)}, GPU-minutes "
            f"{share:.1%} of the grid's (per space: "
            + ", ".join(f"{r['share_of_grid']:.0%}" for r in rows)
            + ")"
        )
    if real:
        for row in real_searches(real):
            print("real:", json.dumps(row))


if __name__ == "__main__":
    main()
