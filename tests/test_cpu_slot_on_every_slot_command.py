"""A named CPU slot (`--cpu-slot NAME`) is reachable by every command that takes a slot:
qualify, bench, reports and cache, as up, stop, down and logs already were."""

from __future__ import annotations

import json


def test_qualify_bench_reports_and_cache_take_a_named_cpu_slot(slot_env, profiles_dir) -> None:
    made = slot_env("up", "--cpu-slot", "a", "--profile", "t-good", "--skip-qualify", "--json")
    assert made.returncode == 0, made.stderr
    url = json.loads(made.stdout)["url"]

    qualified = slot_env(
        "qualify",
        "--cpu-slot",
        "a",
        "--suite",
        "preflight",
        "--no-progress",
        "--json",
        "--profiles-dir",
        str(profiles_dir),
    )
    assert qualified.returncode == 0, qualified.stderr
    doc = json.loads(qualified.stdout)
    assert (doc["target"]["slot"], doc["target"]["release"], doc["target"]["url"]) == ("cpu-a", 1, url)

    bench = slot_env(
        "bench",
        "--cpu-slot",
        "a",
        "--quick",
        "--repeats",
        "1",
        "--json",
        "--profiles-dir",
        str(profiles_dir),
        timeout=600,
    )
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout)["environment"]["release"]["slot"] == "cpu-a"

    reports = json.loads(slot_env("reports", "--cpu-slot", "a", "--json").stdout)["reports"]
    assert {r["kind"] for r in reports} == {"qualify", "bench"} and {r["slot"] for r in reports} == {"cpu-a"}
    assert json.loads(slot_env("reports", "--cpu", "--json").stdout)["reports"] == []  # another slot's

    cache = slot_env("cache", "status", "--cpu-slot", "a", "--json")
    assert cache.returncode == 0, cache.stderr
    assert json.loads(cache.stdout)["volume"].endswith("cache-cpu-a")
    assert slot_env("stop", "--cpu-slot", "a").returncode == 0  # a cache in use is not wiped
    wiped = slot_env("cache", "wipe", "--cpu-slot", "a", "--json")
    assert wiped.returncode == 0 and json.loads(wiped.stdout)["volume"].endswith("cache-cpu-a"), wiped.stderr
