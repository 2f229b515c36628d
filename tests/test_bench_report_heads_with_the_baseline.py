"""bench's report of a slot's release opens with the cutover's rows: this run beside the baseline
release's kept bench run, each delta marked beyond the measured spread or not. Two real bench
runs against the reference runtime at 400 and 200 decode tok/s (their own processes)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from bench_helpers import BENCH_TINY_PROFILE, sim_in_process
from typer.testing import CliRunner

from deploytool.bench import load_run, write_run_report
from deploytool.bench.headline import kept_baseline
from deploytool.cli.app import app
from deploytool.release.state import release_path

pytestmark = pytest.mark.timeout(240)


def bench(url: str, profiles: Path, out: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--url",
            url,
            "--profile",
            "bench-tiny",
            "--profiles-dir",
            str(profiles),
            "--quick",
            "--repeats",
            "2",  # two passes a side: a spread to judge the halved speed by
            "--report",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output


def test_a_slower_releases_bench_report_opens_with_its_regression(tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "bench-tiny.yaml").write_text(BENCH_TINY_PROFILE)
    # release 1's bench, kept where `bench --cpu` keeps it; release 2 is slower
    kept = release_path("cpu", 1) / "reports" / "bench-20261203T000000000Z"
    for tps, out in ((400, kept), (200, tmp_path / "slow")):
        handle = sim_in_process(decode_tps=tps)
        try:
            bench(handle.url, profiles, out)
        finally:
            handle.stop()
    target = SimpleNamespace(
        release=SimpleNamespace(slot="cpu", release=2), previous=SimpleNamespace(release=1)
    )
    baseline = kept_baseline(target)
    assert baseline is not None and baseline[0].startswith("release 1's bench of ")
    write_run_report(load_run(tmp_path / "slow" / "results.json"), tmp_path / "report", baseline)
    html = (tmp_path / "report" / "report.html").read_text()
    top = html.split("<h2>", 1)[0]  # before the run's own sections
    assert "worse beyond the measured spread (decode, 1 request" in top
    assert '<tr class="worse"' in top and "WORSE, beyond the spread" in top
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.index("WORSE, beyond the spread") < md.index("## ")
    # a URL, or a release with no baseline, has no head
    assert kept_baseline(SimpleNamespace(release=None, previous=None)) is None
    assert (
        kept_baseline(
            SimpleNamespace(
                release=SimpleNamespace(slot="cpu", release=2), previous=SimpleNamespace(release=7)
            )
        )
        is None
    )
    assert json.loads((tmp_path / "slow" / "results.json").read_text())["figures"]
