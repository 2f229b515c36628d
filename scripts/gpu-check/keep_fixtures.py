"""Turn a GPU-check results folder (results.tar.xz unpacked) into the fixture files CI replays:
tests/data/sglang-real/<plan>/. Each fixture is kept as recorded, except that a request body
over 4,000 characters (the over-long prompts) is replaced by a note of its length, and a
repeated /metrics body (the 401 probe of /metrics) keeps only its head. Also keeps each plan's
loading timeline, the abort measurement and the launch line, and the SGLang version.

    python keep_fixtures.py RESULTS_DIR [RESULTS_DIR ...] --out tests/data/sglang-real
"""

from __future__ import annotations

import argparse
import json
import shutil
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
    meta = {"launch": plan.get("launch"), "ready_after_s": plan.get("ready_after_s"),
            "memory_log": plan.get("memory_log"), "abort": (plan.get("steps") or {}).get("abort")}
    (out / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
    return kept


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="+", type=Path, help="a results/ folder from results.tar.xz")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--plan", action="append", help="only these plans")
    a = ap.parse_args()
    for results in a.results:
        summary = json.loads((results / "summary.json").read_text())
        for plan_dir in sorted(p for p in results.iterdir() if (p / "fixtures").is_dir()):
            if a.plan and plan_dir.name not in a.plan:
                continue
            target = a.out / plan_dir.name
            if target.exists():
                shutil.rmtree(target)
            print(plan_dir.name, keep_plan(plan_dir, target, summary), "fixtures ->", target)


if __name__ == "__main__":
    main()
