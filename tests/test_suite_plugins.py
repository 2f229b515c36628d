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
