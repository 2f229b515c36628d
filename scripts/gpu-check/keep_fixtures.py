"""Turn a GPU-check results folder (results.tar.xz unpacked) into the fixture files CI replays:
tests/data/sglang-real/<plan>/. Each fixture is kept as recorded, except that a request body
over 4,000 characters (the over-long prompts) is replaced by a note of its length, and a
repeated /metrics body (the 401 probe of /metrics) keeps only its head. Also keeps each plan's
loading timeline, the abort measurement and the launch line, and the SGLang version, and checks
that what it kept has the shape the replay tests read (`problems`): a plan that does not is
named and the script exits 1.

    python keep_fixtures.py RESULTS_DIR [RESULTS_DIR ...] --out tests/data/sglang-real
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def shrink(value, limit=4000):
    if isinstance(value, str) and len(value) > limit:
        return f"<{len(value)} characters: {value[:60]!r}... (shortened by keep_fixtures.py)>"
    if isinstance(value, dict):
        return {k: shrink(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [shrink(v, limit) for v in value]
    return value


def keep_plan(plan_dir: Path, out: Path, summary: dict) -> int:
    out.mkdir(parents=True, exist_ok=True)
    kept = 0
    for f in sorted((plan_dir / "fixtures").glob("*.json")):
        data = json.loads(f.read_text())
        data["request"] = shrink(data.get("request", {}))
        if f.stem == "auth_metrics_no_key":
            data["body"] = data["body"][:2000]
        (out / f.name).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        kept += 1
    if (plan_dir / "loading.json").exists():
        loading = json.loads((plan_dir / "loading.json").read_text())
        loading.pop("first_ready", None)  # its /metrics and /server_info are metrics_before.json
        (out / "loading.json").write_text(json.dumps(loading, indent=1) + "\n")
    plan = summary.get("plans", {}).get(plan_dir.name, {})
    meta = {
        "launch": plan.get("launch"),
        "ready_after_s": plan.get("ready_after_s"),
        "memory_log": plan.get("memory_log"),
        "abort": (plan.get("steps") or {}).get("abort"),
    }
    (out / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
    return kept


ABORT_COUNTERS = (
    "sglang:num_aborted_requests_total",
    "sglang:num_requests_total",
    "sglang:generation_tokens_total",
)


def problems(out: Path) -> list[str]:
    """What tests/test_real_sglang_replay.py and the sim's abort test read of a kept plan: a
    loading timeline that starts refused and whose /health answers 503 then 200, with the info
    routes answering before that 200; an abort record with both hang-ups' counter moves."""
    found = []
    if (out / "loading.json").exists():
        timeline = json.loads((out / "loading.json").read_text())["events"]
        health = [e for e in timeline if e["path"] == "/health"]
        if (
            not health
            or health[0]["status"] is not None
            or "Connection refused" not in (health[0]["error"] or "")
        ):
            found.append(f"{out}/loading.json: the first /health probe was not refused")
        if [e["status"] for e in health if e["status"] is not None] != [503, 200]:
            found.append(f"{out}/loading.json: /health did not answer 503 then 200")
        models = [e["t_s"] for e in timeline if e["path"] == "/v1/models" and e["status"] == 200]
        if health and (not models or models[0] >= health[-1]["t_s"]):
            found.append(f"{out}/loading.json: /v1/models did not answer before /health's 200")
    abort = json.loads((out / "run.json").read_text()).get("abort")
    if abort is not None:
        for kind in ("stream", "plain"):
            missing = [c for c in ABORT_COUNTERS if c not in ((abort.get(kind) or {}).get("deltas") or {})]
            if missing:
                found.append(f"{out}/run.json: abort.{kind}.deltas lacks {', '.join(missing)}")
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+", type=Path, help="a results/ folder from results.tar.xz")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--plan", action="append", help="only these plans")
    a = ap.parse_args()
    bad: list[str] = []
    for results in a.results:
        summary = json.loads((results / "summary.json").read_text())
        for plan_dir in sorted(p for p in results.iterdir() if (p / "fixtures").is_dir()):
            if a.plan and plan_dir.name not in a.plan:
                continue
            target = a.out / plan_dir.name
            if target.exists():
                shutil.rmtree(target)
            print(plan_dir.name, keep_plan(plan_dir, target, summary), "fixtures ->", target)
            bad += problems(target)
    for line in bad:
        print(line, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
