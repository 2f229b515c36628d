"""compare's report opens as the cutover report does: the figures that matter, run A beside run
B with delta and whether the delta is beyond the measured spread, and the latency picture, before
the table of every figure.

Two bench runs of the reference runtime, run B's decode speed half of run A's: the top table
must mark decode WORSE beyond the spread, with the interval the comparison itself computed.
The HTML is read as a parsed document (and, where Chromium is installed, as the DOM a browser
lays out).
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from bench_helpers import sim_in_process, tiny_method
from browser_helpers import CHROMIUM, LAYOUT, Browser
from typer.testing import CliRunner

from deploytool.bench import run_bench
from deploytool.checks.targets import Target
from deploytool.cli.app import app

pytestmark = pytest.mark.timeout(240)


class Outline(HTMLParser):
    """The page in document order: each table (its class, headers, rows' cells), image and h2."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[dict] = []
        self._cell: list[str] | None = None
        self._table: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = {"kind": "table", "class": a.get("class") or "", "headers": [], "rows": []}
            self.items.append(self._table)
        elif tag == "tr" and self._table is not None:
            self._table["rows"].append([])
        elif tag in ("th", "td"):
            self._cell = []
        elif tag == "img":
            self.items.append({"kind": "img", "alt": a.get("alt") or "", "src": a.get("src") or ""})
        elif tag == "h2":
            self.items.append({"kind": "h2", "text": ""})

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        elif self.items and self.items[-1]["kind"] == "h2" and not self.items[-1]["text"]:
            self.items[-1]["text"] = data.strip()

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None and self._table is not None:
            text = "".join(self._cell).strip()
            (self._table["headers"] if tag == "th" else self._table["rows"][-1]).append(text)
            self._cell = None
        elif tag == "table":
            self._table = None


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare-top")
    for name, speed in (("a", 400.0), ("b", 200.0)):
        handle = sim_in_process(decode_tps=speed)
        try:
            run_bench(
                Target(url=handle.url, profile=None),
                # what the top reads is the one-request rows (decode, TTFT, TPOT): one request per
                # load slot and one short prefill keep the rest of each pass brief
                method=tiny_method(
                    repeats=2, load_requests_per_slot=1, prefill_prompt_tokens=[2000], prefill_prompts_each=1
                ),
                report_dir=root / name,
                progress=False,
            )
        finally:
            handle.stop()
    result = CliRunner().invoke(
        app,
        ["compare", str(root / "a"), str(root / "b"), "--report", str(root / "cmp")],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return root / "cmp"


def test_compare_html_opens_with_the_top_table_and_a_picture(compared):
    page = Outline()
    page.feed((compared / "comparison.html").read_text())
    kinds = [(i, item) for i, item in enumerate(page.items) if item["kind"] in ("table", "img")]
    top_at, top = next((i, t) for i, t in kinds if t["kind"] == "table" and "compare" in t["class"])
    every_at = next(i for i, t in kinds if t["kind"] == "table" and "compare" not in t["class"])
    picture_at, picture = next((i, t) for i, t in kinds if t["kind"] == "img")
    assert top_at < every_at and picture_at < every_at  # the top section comes before the detailed table
    assert top["headers"] == ["figure", "run A", "run B", "delta", "against the spread"]
    rows = {r[0]: r for r in top["rows"] if r}
    decode = rows["decode, 1 request"]
    assert decode[4] == "WORSE, beyond the spread" and decode[3].startswith("-")
    assert re.search(r"\(-\d+(\.\d)?%\)", decode[3])  # a delta with its percentage
    assert {
        "TTFT p50, 1 request",
        "TTFT p99, 1 request",
        "TPOT p50, 1 request",
        "TPOT p99, 1 request",
    } <= set(rows)
    assert rows["TPOT p50, 1 request"][4] == "WORSE, beyond the spread"  # slower decode: longer per token
    assert picture["src"].startswith("data:image/png;base64,")
    assert (
        picture["alt"].startswith("Box plots of per-request latency.")
        and "run A median" in picture["alt"]
        and "run B median" in picture["alt"]
    )


def test_the_top_rests_on_the_comparisons_own_interval(compared):
    doc = json.loads((compared / "comparison.json").read_text())
    decode = next(r for r in doc["rows"] if r["key"] == "decode_c1_tps")
    low, high = decode["intervals"][1]
    assert high < 1.0  # run B is slower, beyond the spread
    html = (compared / "comparison.html").read_text()
    row = re.search(r'<tr class="worse" title="([^"]*)"><td>decode, 1 request</td>', html)
    assert row is not None and f"[{low:.2f}-{high:.2f}]" in row.group(1)
    md = (compared / "comparison.md").read_text()
    assert (
        md.index("## run B against run A")
        < md.index("WORSE, beyond the spread")
        < md.index("## Every figure")
    )
    assert "Box plots of per-request latency" in md  # the picture, in words


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_compare_report_in_a_browser(compared, tmp_path):
    with Browser(compared / "comparison.html", tmp_path / "profile") as browser:
        found = browser.evaluate(LAYOUT)
    assert found["scripts"] == 0
    assert found["headers"] == ["figure", "run A", "run B", "delta", "against the spread"]
    decode = next(r for r in found["rows"] if r["cells"][0] == "decode, 1 request")
    assert decode["cls"] == "worse" and decode["cells"][4] == "WORSE, beyond the spread"
    first = found["images"][0]
    assert first["alt"].startswith("Box plots") and first["complete"] and first["natural"] > 0
    assert first["box"]["top"] < 1000 and found["table"]["top"] < 1000  # both on the first screen
