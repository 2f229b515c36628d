"""`build` says what a build costs (size, downloads, time) only when it builds: an image that is
up to date is said so, with no "about a minute" announced first."""

from __future__ import annotations

pytestmark = __import__("pytest").mark.index  # the sim image's wheels are downloaded once (then cached)


def test_an_up_to_date_build_announces_no_cost(slot_env) -> None:
    first = slot_env("build", "--profile", "t-good")
    assert first.returncode == 0, first.stderr
    if "up to date" not in first.stderr:  # it built: the cost came before, with why
        assert "expected about 260 MB" in first.stderr
    second = slot_env("build", "--profile", "t-good")
    assert second.returncode == 0, second.stderr
    assert "up to date" in second.stderr, second.stderr
    assert "expected" not in second.stderr and "about a minute" not in second.stderr, second.stderr
