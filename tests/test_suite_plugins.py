"""The suite's own plugins are registered: without run_plan's hooks the run still passes, only
slower and in another order (a linter's fix once removed their imports and nothing failed)."""

from __future__ import annotations

import pytest

# what run_plan.py hooks into: the scheduler and its units, the workers' collection, the timings
RUN_PLAN_HOOKS = (
    "pytest_xdist_make_scheduler",
    "pytest_configure_node",
    "pytest_runtest_logreport",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
)


def test_run_plans_hooks_are_registered(pytestconfig: pytest.Config) -> None:
    plugin = pytestconfig.pluginmanager.get_plugin("run_plan")
    assert plugin is not None, "tests/conftest.py names run_plan in pytest_plugins"
    hooks = pytestconfig.pluginmanager.hook
    for name in RUN_PLAN_HOOKS:
        if not hasattr(hooks, name):  # pytest_xdist_make_scheduler exists only with xdist installed
            pytest.fail(f"no hook {name}: is pytest-xdist installed (pip install -e '.[dev]')?")
        owners = {impl.plugin for impl in getattr(hooks, name).get_hookimpls()}
        assert plugin in owners, f"run_plan.{name} is not registered as a hook"


def test_lifecycle_fixtures_reach_every_module(request: pytest.FixtureRequest) -> None:
    # asked by name, as the docker tests ask for them (profiles_dir needs no engine)
    profiles = request.getfixturevalue("profiles_dir")
    assert profiles.is_dir(), "lifecycle_helpers' fixtures are registered (pytest_plugins in conftest.py)"


def test_a_unit_with_no_time_of_its_own_is_guessed_from_the_timed_units_of_its_kind() -> None:
    from run_plan import _guesses

    units = {
        "docker:tests/a.py::t": {"tests/a.py::t": False},
        "docker:tests/b.py::t": {"tests/b.py::t": False},
        "docker:tests/new.py::t": {"tests/new.py::t": False},
        "tests/x.py": {f"tests/x.py::t{i}": False for i in range(4)},
        "tests/renamed.py": {f"tests/renamed.py::t{i}": False for i in range(3)},
    }
    docker = {u for u in units if u.startswith("docker:")}
    last = {"docker:tests/a.py::t": 30.0, "docker:tests/b.py::t": 10.0, "tests/x.py": 2.0}
    guess = _guesses(units, last, docker)
    assert guess("docker:tests/new.py::t") == 20.0  # a docker test: the mean of the timed ones
    assert guess("tests/renamed.py") == 1.5  # three tests at the mean half a second of tests/x.py
    # a new clone times nothing: every guess is 0 and the order falls back to the kinds
    assert _guesses(units, {}, docker)("docker:tests/new.py::t") == 0.0
