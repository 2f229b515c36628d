"""The cutover report as a person opens it: headless Chromium at a 1280-px window reads the DOM.

Three qualifications on the reference runtime (loopback servers, the sim profile's suites with
the performance suite on): release 1 at 400 decode tok/s, release 2 made slower (200 tok/s),
and release 3 unchanged (400 again). Release 2's report shows the regression at the top, marked
beyond the spread; release 3's shows its figures within the spread (see the test for what a
loaded machine moves). In both, the first
1,000 CSS px hold the verdict, the comparison table with deltas and a picture; every image has
alt text and loads with no network; the collapsed sections hold every figure of results.json.

UPDATE_DOC_SCREENSHOTS=1 copies the two first screens this test's browser takes into docs/.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from browser_helpers import CHROMIUM, LAYOUT, Browser
from qualify_helpers import OURS, SIM_SETTINGS, qualify, sim_profile
from sim_process import SimProcess

from deploytool.qualify.report import flatten_figures, is_heatmap

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)"
)

DOCS = Path(__file__).resolve().parent.parent / "docs"
SCREEN = 1000  # CSS px: the first screen
# The performance suite's three passes of the quick method, with a shorter warm-up and one prompt
# per prefill length (the profile's bench.quick section, as a slot's profile would set it). The
# decode phases keep the quick sizes (three 128-token decodes, two 128-token requests per load
# slot): their figures are held within the spread for an unchanged release, and shorter streams
# let a busy moment of the machine move them beyond it (seen with two 64-token decodes a pass,
# and with one 64-token request a slot).
# The other suites with shorter generations and resolution ladder: what the report shows of them
# (every figure, folded) does not depend on their size.
PERFORMANCE = {"performance": {"quick": True, "repeats": 3, "max_regression_pct": 25}}
SMALLER = {"stress": {"max_tokens": 200}, "vision": {"resolutions": [256], "photo_side": 384}}
BENCH = {"quick": {"warmup_output_tokens": 8, "prefill_prompts_each": 1}}


def run_release(
    folder: Path, decode_tps: int, baseline: Path | None = None, name: str | None = None, port: int = 0
) -> int:
    """Qualify one release; returns its port (a later release of the slot keeps it, as `up` does,
    so the contract suite's comparison with the baseline holds)."""
    # the runtime in its own process: the qualification's client and the server then run side by
    # side on the two cores, instead of taking turns at one interpreter lock
    flags = {k: v for k, v in SIM_SETTINGS.items() if k not in ("startup_seconds", "log_requests")}
    with SimProcess(**{**flags, "decode_tps": decode_tps, "gsm8k_oracle": 0.96, "port": port}) as server:
        extra = (
            {"previous_results": baseline / "report" / "results.json", "baseline": name} if baseline else {}
        )
        profile = sim_profile(server.port)
        profile.bench = BENCH
        qualify(
            server.url,
            folder,
            profile=profile,
            suites=[*OURS, "performance"],
            overrides={**PERFORMANCE, **SMALLER},
            limit=10,
            **extra,
        )
    return server.port


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    root = tmp_path_factory.mktemp("cutover")
    first = root / "r1"
    port = run_release(first, 400)
    run_release(root / "r2", 200, first, "release 1 (it served before release 2 was cut over)", port)
    run_release(root / "r3", 400, first, "release 1 (it served before release 3 was cut over)", port)
    return {"slower": root / "r2" / "report", "same": root / "r3" / "report"}


def layout(report: Path, shot: Path) -> dict:
    with Browser(report / "report.html", shot.parent / (shot.stem + "-profile")) as browser:
        found = browser.evaluate(LAYOUT)
        browser.screenshot(shot)
    return found


def check_first_screen(found: dict) -> None:
    assert found["scripts"] == 0
    assert found["h1"]["bottom"] <= SCREEN and found["h1_text"].startswith("deploytool qualify:")
    assert found["table"] is not None and found["table"]["bottom"] <= SCREEN, found["table"]
    assert "delta" in found["headers"] and "against the spread" in found["headers"]
    decode = next(r for r in found["rows"] if r["cells"][0] == "decode, 1 request")
    assert decode["box"]["bottom"] <= SCREEN
    first_screen = [
        i for i in found["images"] if i["box"]["top"] < SCREEN and i["box"]["bottom"] <= SCREEN + 1
    ]
    assert first_screen, found["images"]
    for image in found["images"]:  # inline, decoded with no network, and stated in words
        assert image["src"].startswith("data:image/png;base64") and image["complete"] and image["natural"] > 0
        assert len(image["alt"]) > 40


def check_folded_sections_hold_every_figure(found: dict, report: Path) -> None:
    doc = json.loads((report / "results.json").read_text())
    folded = {d["id"]: d for d in found["details"]}
    assert folded and not any(d["open"] for d in folded.values())  # collapsed
    for suite in doc["suites"]:
        text = folded[suite["name"]]["text"]
        for gate in suite["gates"]:
            assert gate["name"] in text
        heatmaps = [k for k, v in suite["figures"].items() if is_heatmap(v)]
        scalars, tables = flatten_figures({k: v for k, v in suite["figures"].items() if k not in heatmaps})
        for key in [*heatmaps, *scalars, *tables]:
            assert key in text, f"{suite['name']}: figure {key} is not in its folded section"
    assert "server_info.version" in folded["server"]["text"]


def test_a_slower_release_shows_its_regression_at_the_top_beyond_the_spread(releases, tmp_path):
    report = releases["slower"]
    found = layout(report, tmp_path / "cutover-slower.png")
    check_first_screen(found)
    assert "FAILED" in found["h1_text"]  # the performance gate's regression rule fails it too
    why = json.loads((report / "comparison.json").read_text())["why"]
    assert why and all(line.startswith("performance: regression: ") for line in why), why
    assert (
        "worse beyond the measured spread" in found["headline"] and "decode, 1 request" in found["headline"]
    )
    decode = next(r for r in found["rows"] if r["cells"][0] == "decode, 1 request")
    assert decode["cls"] == "worse" and decode["cells"][4] == "WORSE, beyond the spread"
    assert decode["cells"][3].startswith("-")  # fewer tok/s
    comparison = json.loads((report / "comparison.json").read_text())
    # the runtime's own setting, as its server info reports it (a float from its command line)
    assert any("decode_tps: 400.0 -> 200.0" in line for line in comparison["changes"])
    check_folded_sections_hold_every_figure(found, report)
    keep(tmp_path / "cutover-slower.png")


def test_an_unchanged_release_shows_every_delta_within_the_spread(releases, tmp_path):
    report = releases["same"]
    found = layout(report, tmp_path / "cutover-unchanged.png")
    check_first_screen(found)
    comparison = json.loads((report / "comparison.json").read_text())
    # What the release sets passes; what a loaded machine schedules (a 4,000-token prefill, TTFT, the
    # total of four concurrent requests) can move past the gate between two runs of the same release
    # (seen: prefill 56% slower while the suite's other workers built images), and then it alone
    # is the reason the report gives
    scheduling = ("prefill", "TTFT", "4 concurrent, total")
    assert "PASSED" in found["h1_text"] or all(
        any(word in reason for word in scheduling) for reason in comparison["why"]
    ), comparison["why"]
    statuses = {r["cells"][0]: r["cells"][4] for r in found["rows"]}
    with_spread = {k: s for k, s in statuses.items() if "spread" in s and s != "no spread recorded"}
    assert len(with_spread) >= 5
    # What the release sets (the runtime's decode speed, and so TPOT) is within the spread, or
    # beyond it by a sliver: the runtime paces its tokens to absolute deadlines, so a run's
    # per-request figures agree to a few tenths of a percent and their interval is that narrow
    # too; a stall of the loaded machine on one run's last tokens (seen once in CI, while other
    # workers built images) then moves the figure past it by about a percent. What a release
    # changes moves it by tens of percent (the slower release: 50%). On a shared, loaded machine
    # a figure of the machine's scheduling (TTFT under load, the total of four concurrent
    # requests, one value a pass) can move beyond its three-pass spread between two runs of the
    # same release: the report would say so, and this test names it.
    rows = {r["figure"]: r for r in comparison["rows"]}
    paced = ("decode, 1 request", "decode, 4 concurrent, per request", "TPOT p50, 1 request")
    for figure in paced:
        assert with_spread[figure] == rows[figure]["status"], (figure, with_spread[figure], rows[figure])
        assert with_spread[figure] == "within the spread" or abs(rows[figure]["delta_pct"]) < 3, (
            figure,
            rows[figure],
            statuses,
        )
    assert all(
        s == "within the spread"
        for k, s in with_spread.items()
        if k not in paced and not k.startswith(("TTFT", "decode, 4 concurrent, total", "prefill"))
    ), statuses
    assert comparison["changes"] == []
    quality = [r for r in comparison["rows"] if r["group"] == "quality"]
    assert quality and all(r["status"] in ("unchanged", "within the spread") for r in quality), quality
    check_folded_sections_hold_every_figure(found, report)
    keep(tmp_path / "cutover-unchanged.png")


def keep(shot: Path) -> None:
    """The screenshot is small and a PNG; with UPDATE_DOC_SCREENSHOTS=1 it becomes docs/'s."""
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) < 400_000
    if os.environ.get("UPDATE_DOC_SCREENSHOTS") == "1":
        shutil.copyfile(shot, DOCS / shot.name)
