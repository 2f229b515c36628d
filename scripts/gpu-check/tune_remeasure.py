"""Re-measure tune's winner and the profile's own launch with SGLang's own client
(`sglang.bench_serving`) at the winner's scoring load, in the same device call as the search:
the ratio it gives is compared with tune's interval for winner / profile's own launch.

    python3 tune_remeasure.py PROFILE PROFILES_DIR TUNE_JSON OUT_JSON

Each launch is started by deploytool's local server (tune/local.py: the same argv the search
used), measured by bench_serving (random prompts of the space's sizes, --max-concurrency the
winner's level, ignore_eos as tune's passes), stopped; order winner, base, base, winner (A B B A)
so drift hits both alike.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from deploytool.profiles import ProfileStore
from deploytool.tune.local import LocalServer
from deploytool.tune.space import with_args


def bench(url: str, profile, concurrency: int, prompt: int, output: int, out: Path) -> float:
    cmd = [
        sys.executable,
        "-m",
        "sglang.bench_serving",
        "--backend",
        "sglang",
        "--base-url",
        url,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(prompt),
        "--random-output-len",
        str(output),
        "--random-range-ratio",
        "1.0",
        "--num-prompts",
        str(max(32, 4 * concurrency)),
        "--max-concurrency",
        str(concurrency),
        "--output-file",
        str(out),
    ]
    # ignore_eos stays on (bench_serving's default without --disable-ignore-eos), as tune's passes
    subprocess.run(cmd, check=True, timeout=600)
    last = json.loads(out.read_text().strip().splitlines()[-1])
    return float(last["output_throughput"])


def main() -> None:
    name, profiles_dir, tune_json, out_json = sys.argv[1:5]
    data = json.loads(Path(tune_json).read_text())
    store = ProfileStore([Path(profiles_dir)])
    profile = store.get(name)
    winner = next(c for c in data["candidates"] if c["id"] == data["winner"])
    # the level the winner's score came from: the fastest inside the SLO
    points = [
        pt
        for p in winner["passes"]
        for pt in p["points"]
        if pt["per_gpu_tps"] and pt["failed"] == 0 and pt["slo_excess"] <= 1.0
    ]
    level = max(points, key=lambda pt: pt["per_gpu_tps"])["concurrency"]
    flags = {**winner["changes"], **winner["derived"]}
    launches = {"winner": with_args(profile, {**profile.server.args, **flags}), "base": profile}
    space = data["space"]
    tps: dict[str, list[float]] = {"winner": [], "base": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i, which in enumerate(("winner", "base", "base", "winner")):
            server = LocalServer(launches[which], Path(tmp) / f"{which}-{i}.log")
            try:
                server.start()
                why = server.wait_ready(float(profile.health.budget_seconds()))
                if why:
                    raise SystemExit(f"{which} did not start: {why}")
                tps[which].append(
                    bench(
                        server.url,
                        launches[which],
                        level,
                        space["prompt_tokens"],
                        space["output_tokens"],
                        Path(tmp) / f"{which}-{i}.jsonl",
                    )
                )
            finally:
                server.stop()
    ratio = (sum(tps["winner"]) / 2) / (sum(tps["base"]) / 2)
    interval = data.get("ratio_to_base")
    result = {
        "winner": data["winner"],
        "flags": flags,
        "concurrency": level,
        "output_tps": tps,
        "bench_serving_ratio": round(ratio, 4),
        "tune_ratio_interval": interval,
        "inside": bool(interval and interval[1] <= ratio <= interval[2]),
    }
    Path(out_json).write_text(json.dumps(result, indent=2))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
