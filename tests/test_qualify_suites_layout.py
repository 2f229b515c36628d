"""qualify's suites read like a list: one module or package each under qualify/suites/, the
helpers a package holds used by that suite alone, each suite's `run` short enough to read at once,
and requests in flight bounded by the suite's context, not by a semaphore of each suite's own."""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path

import deploytool.qualify as qualify_package
from deploytool.qualify.suites import SUITE_MODULES, registry

QUALIFY = Path(qualify_package.__file__).parent
SUITES = QUALIFY / "suites"
# 60 lines as the code was written by hand; the formatter writes the same code in 1.227 times the
# lines (tests/test_architecture.py), so 74 as it is formatted now
RUN_MAX_LINES = 74


@functools.cache
def _imports(path: Path) -> frozenset[str]:
    """Absolute dotted names a module imports (relative imports resolved against its package).
    Kept per file: the helpers' check reads every module of src/ once per helper, and parsing
    them again for each was nearly all of its CPU."""
    package = ".".join(path.relative_to(QUALIFY.parent.parent).with_suffix("").parts)
    package = package.rsplit(".", 1)[0] if path.name != "__init__.py" else package.removesuffix(".__init__")
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return frozenset(out)


def test_every_suite_run_is_at_most_74_lines() -> None:
    long = {}
    for name, module in registry().items():
        lines, _ = inspect.getsourcelines(module.run)
        if len(lines) > RUN_MAX_LINES:
            long[name] = len(lines)
    assert not long, f"suites whose run is over {RUN_MAX_LINES} lines (name its steps): {long}"


def test_the_registry_lists_every_suite_folder_and_module() -> None:
    on_disk = {p.stem for p in SUITES.glob("*.py") if p.name != "__init__.py"}
    on_disk |= {p.parent.name for p in SUITES.glob("*/__init__.py")}
    assert on_disk == set(SUITE_MODULES)


def test_a_suite_packages_helpers_serve_that_suite_alone() -> None:
    """A helper inside suites/<name>/ is imported by nothing in src/ outside that package (the
    stress suite's probes read GSM8K's test set through the gsm8k suite: a suite, not a helper)."""
    leaks = []
    for helper in SUITES.glob("*/*.py"):
        if helper.name == "__init__.py":
            continue
        owner = helper.parent
        dotted = f"deploytool.qualify.suites.{owner.name}.{helper.stem}"
        for path in QUALIFY.parent.rglob("*.py"):
            if owner in path.parents:
                continue
            if any(name == dotted or name.startswith(dotted + ".") for name in _imports(path)):
                leaks.append(f"{path.relative_to(QUALIFY.parent)} imports {dotted}")
    assert not leaks, leaks


def test_no_suite_keeps_its_own_semaphore() -> None:
    """Requests in flight are bounded by SuiteContext.send (or ctx.bounded(n)), in one place."""
    own = []
    for path in SUITES.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("Semaphore", "BoundedSemaphore"):
                own.append(f"{path.relative_to(SUITES)}:{node.lineno}")
    assert not own, f"use ctx.send / ctx.bounded(n) instead: {own}"


def test_ctx_send_keeps_the_suites_concurrency_and_bounded_its_own() -> None:
    """Counted where the requests arrive (a client standing in for the wire), not by the bound itself."""
    import asyncio

    from deploytool.qualify.context import SuiteContext
    from deploytool.server.facts import ServerFacts

    class Counting:
        def __init__(self) -> None:
            self.now = self.peak = self.calls = 0
            self.keep: list[bool | None] = []

        async def chat(self, payload: dict, *, keep_chunks: bool | None = None) -> str:
            self.now += 1
            self.peak = max(self.peak, self.now)
            self.calls += 1
            self.keep.append(keep_chunks)
            await asyncio.sleep(0.01)
            self.now -= 1
            return payload["n"]

    class Settings:
        concurrency = 3

    async def scenario() -> tuple[Counting, Counting, list, int, int]:
        bounded, unbounded = Counting(), Counting()
        ctx = SuiteContext(
            client=bounded, settings=Settings(), server=ServerFacts(url="http://x"), profile=None, target=None
        )
        answers = await asyncio.gather(
            *(ctx.send({"n": i}, keep_chunks=True if i == 0 else None) for i in range(12))
        )
        send_peak, bounded.peak = bounded.peak, 0
        own = ctx.bounded(5)
        await asyncio.gather(*(own.send({"n": i}) for i in range(12)))
        free = SuiteContext(
            client=unbounded, settings=object(), server=ServerFacts(url="http://x"), profile=None, target=None
        )
        await asyncio.gather(*(free.send({"n": i}) for i in range(12)))
        return bounded, unbounded, answers, send_peak, own.peak

    bounded, unbounded, answers, send_peak, own_peak = asyncio.run(scenario())
    assert answers == list(range(12))
    assert bounded.calls == 24
    assert send_peak == 3  # the suite's concurrency setting
    assert bounded.peak == own_peak == 5  # a phase's own bound, and the peak it counts
    assert bounded.keep[0] is True and bounded.keep[1] is None
    assert unbounded.peak == 12  # a suite without a concurrency setting is not bounded
