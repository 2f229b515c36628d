"""`monitor down` on the real engine says a clean stop is a stop (not "not running
(ConnectError)"), keeps the data volume unless --volumes, and says when there was nothing to stop."""

from __future__ import annotations

import json

from conftest import free_port, run_cli

from deploytool.monitor import stack


def test_monitor_down_reports_the_stop_and_removes_the_data_only_with_volumes(docker_engine) -> None:
    try:
        started = run_cli("monitor", "up", "--port", str(free_port()), "--scrape-interval", "5", "--json")
        assert started.returncode == 0, started.stderr
        down = run_cli("monitor", "down")
        assert down.returncode == 0, down.stderr
        assert down.stdout.startswith("monitor: stopped; data volume "), down.stdout
        assert "ConnectError" not in down.stdout and "not running" not in down.stdout
        assert docker_engine.volume_exists(stack.volume_name())  # kept for the next monitor up

        again = json.loads(run_cli("monitor", "down", "--json").stdout)
        assert (again["stopped"], again["volume_removed"]) == (False, False)
        assert again["why"].startswith("it was not running"), again

        assert run_cli("monitor", "up", "--port", str(free_port()), "--json").returncode == 0
        gone = run_cli("monitor", "down", "--volumes", "--json")
        assert gone.returncode == 0, gone.stderr
        doc = json.loads(gone.stdout)
        assert (doc["stopped"], doc["volume_removed"], doc["running"]) == (True, True, False), doc
        assert not docker_engine.volume_exists(stack.volume_name())
    finally:
        run_cli("monitor", "down", "--volumes", "--json")
