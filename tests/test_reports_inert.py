"""Reports are inert: whatever a server said reaches report.html escaped, under a policy that
runs no script and loads nothing, and reaches report.md inside code (spans, fences or escaped
table cells), so opening the report of a hostile server runs nothing of it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from deploytool import report
from deploytool.qualify.report import write_reports
from deploytool.qualify.results import QualifyReport
from deploytool.qualify.suite_api import Gate, SuiteResult, Verdict
from deploytool.server.facts import ServerFacts

PAYLOAD = '</pre></code>"\'><script>document.title="pwned"</script><img src=x onerror=alert(1)>`|[x](javascript:alert(1))'
TEMPLATES = Path(report.__file__).parent / "templates"

# The context keys the templates print with `|safe`: each is HTML the writers build with escaping
# of their own (report.table_html, qualify.report.heatmap_html, inline PNG data URIs).
BUILT_HTML = {
    "overview",
    "server",
    "gates_table",
    "figures_table",
    "figures_html",
    "groups_html",
    "sweep_html",
    "table_html",
    "heatmap",
    "table",
    "comparison_html",
}


class Hostile:
    """Any value a template asks for: every attribute, item and call is another Hostile, every
    string is the payload; the keys in BUILT_HTML are markup the writer escaped already."""

    def __init__(self, name: str = "") -> None:
        self._name = name

    def __getattr__(self, name: str) -> Hostile | str:
        if name.startswith("__"):
            raise AttributeError(name)
        return (
            "<p>built</p>" if name in ("gates_table", "figures_table", "comparison_html") else Hostile(name)
        )

    def __getitem__(self, key: object) -> Hostile:
        return Hostile()

    def __call__(self, *args: object, **kwargs: object) -> Hostile:
        return Hostile(self._name)

    def __iter__(self):
        # `.items()` of the tables and heat maps yields (name, built HTML); anything else yields
        # two hostile values (enough for `for a, b in ...`)
        if self._name == "items":
            return iter([(Hostile(), "<p>built</p>")] * 2)
        return iter([Hostile(), Hostile()])

    def __len__(self) -> int:
        return 2

    def __bool__(self) -> bool:
        return True

    def __float__(self) -> float:
        return 0.5

    def __int__(self) -> int:
        return 1

    def __mul__(self, other: object) -> float:
        return 0.5

    __rmul__ = __truediv__ = __mul__

    def __str__(self) -> str:
        return PAYLOAD


def _html_templates() -> list[str]:
    return sorted(p.name for p in TEMPLATES.glob("*.html.j2") if p.name != "base.html.j2")


def test_html_templates_are_found():
    assert {"qualify.html.j2", "bench.html.j2", "bench_compare.html.j2"} <= set(_html_templates())


@pytest.mark.parametrize("template", _html_templates())
def test_every_html_template_escapes_every_string_field(template):
    context = {
        name: Hostile(name)
        for name in (
            "doc",
            "run",
            "comparison",
            "names",
            "sections",
            "plots",
            "method_items",
            "plot",
            "pareto",
            "top",
            "pictures",
            "headlines",
            "tops",
            "picture",
        )
    }
    context.update(dict.fromkeys(BUILT_HTML, "<p>built</p>"))
    context["title"] = Hostile("title")
    html = report.render(template, **context)
    assert "<script" not in html and "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    assert "&lt;script&gt;" in html  # the payload was printed, escaped
    assert _csp(html) is not None


@pytest.mark.parametrize("template", sorted(p.name for p in TEMPLATES.glob("*.html.j2")))
def test_safe_is_applied_only_to_html_the_writers_escaped(template):
    source = (TEMPLATES / template).read_text()
    marked = re.findall(r"\{\{\s*([\w.]+)\s*\|\s*safe\s*\}\}", source)
    assert len(marked) == len(re.findall(r"\|\s*safe", source)), (
        "a |safe on an expression this test cannot read"
    )
    assert {name.split(".")[-1] for name in marked} <= BUILT_HTML


def _csp(html: str) -> str | None:
    found = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html)
    return found.group(1) if found else None


def _hostile_qualify(tmp_path: Path) -> QualifyReport:
    suite = SuiteResult(
        name="contract",
        verdict=Verdict.FAILED,
        reason=PAYLOAD,
        method=PAYLOAD,
        figures={
            PAYLOAD: PAYLOAD,
            "nested": {"x": PAYLOAD},
            "rows": [{PAYLOAD: PAYLOAD}],
            "matrix": {"rows": [PAYLOAD], "columns": [PAYLOAD], "values": [[0.5]], "title": "t" + PAYLOAD},
        },
        gates=[Gate(name=PAYLOAD, threshold=PAYLOAD, measured=PAYLOAD, passed=False, detail=PAYLOAD)],
        transcripts=[{"passed": False, "response": PAYLOAD + "\n```\n# heading\n" + PAYLOAD}],
    )
    server = ServerFacts(
        url="http://127.0.0.1:1/" + PAYLOAD,
        reachable=True,
        error=PAYLOAD,
        server_info={"model_path": PAYLOAD},
        model_info={PAYLOAD: PAYLOAD},
        models={"data": [{"id": PAYLOAD}]},
    )
    return QualifyReport(
        url="http://127.0.0.1:1/" + PAYLOAD,
        report_dir=tmp_path,
        profile=PAYLOAD,
        slot=PAYLOAD,
        release=1,
        model={"identity": PAYLOAD},
        suites=[suite],
        server=server,
        started_at=PAYLOAD,
        could_not_run=PAYLOAD,
    )


def test_a_hostile_servers_qualify_report_is_inert(tmp_path):
    from deploytool.qualify.report import Against
    from deploytool.qualify.results import results_document

    hostile = _hostile_qualify(tmp_path)
    # the baseline is as hostile: its figures, labels and records reach the top section's table
    baseline = results_document(hostile)
    baseline["target"]["image"] = PAYLOAD
    write_reports(hostile, Against(doc=baseline, name=PAYLOAD, record={"image": PAYLOAD}))
    html = (tmp_path / "report.html").read_text()
    assert "<script" not in html and "<img src=x" not in html
    assert html.count("&lt;script&gt;") >= 10
    policy = _csp(html)
    assert policy is not None and "default-src 'none'" in policy and "script-src" not in policy
    # Markdown rendered as a viewer would (raw HTML allowed, tables on): no script, no link
    rendered = (
        MarkdownIt("commonmark", {"html": True}).enable("table").render((tmp_path / "report.md").read_text())
    )
    assert "<script" not in rendered and "<img src=x" not in rendered and 'href="javascript' not in rendered
    assert "# heading" not in re.sub(r"<pre><code[^>]*>.*?</code></pre>", "", rendered, flags=re.S)


def test_markdown_code_spans_and_fences_outlast_the_text():
    assert report.md_code("a ``b`` c") == "```a ``b`` c```"
    assert report.md_code("x\ny") == "`x y`"
    fenced = report.md_fence("````\n<script>", "json")
    assert fenced.startswith("`````json\n") and fenced.endswith("\n`````")


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install chromium)")
def test_a_browser_runs_no_script_of_a_hostile_report(tmp_path):
    write_reports(_hostile_qualify(tmp_path))
    page = tmp_path / "report.html"
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            "--user-data-dir=" + str(tmp_path / "profile"),
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    title = re.search(r"<title>(.*?)</title>", done.stdout, re.S)
    assert title is not None and "pwned" not in title.group(1)
    assert title.group(1).startswith("deploytool qualify")
    # the same payload without escaping does run in that browser (the check can see a script)
    raw = tmp_path / "raw.html"
    raw.write_text(
        "<html><head><title>before</title></head><body><script>document.title='pwned'</script></body></html>"
    )
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--dump-dom",
            "--user-data-dir=" + str(tmp_path / "profile"),
            raw.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "<title>pwned</title>" in done.stdout
