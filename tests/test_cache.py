"""The slot's JIT cache volume on the real engine: kept when the toolchain and cards are the
same, wiped before the container starts when they differ, and journaled either way."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from lifecycle_helpers import up

from deploytool.host.slots import Slot
from deploytool.release.cache import FINGERPRINT_FILE, _in_volume

pytestmark = (
    pytest.mark.index
)  # the sim image's wheels are downloaded once (then cached); docker: from the fixture
SLOT = Slot()


def journal_events(kind: str) -> list[dict]:
    entries = json.loads(run_cli("journal", "--cpu", "--json", "--limit", "200").stdout)["entries"]
    return [e for e in entries if e["event"] == kind]


def shell(engine, image: str, script: str) -> str:
    return _in_volume(engine, image, SLOT, script)


def test_cache_kept_when_unchanged_and_wiped_when_stale(slot_env, docker_engine):
    first = up(slot_env, "t-good")
    assert first.returncode == 0, first.stderr
    image = json.loads(first.stdout)["image"]
    assert journal_events("cache.created")
    shell(docker_engine, image, "mkdir -p /cache/flashinfer && echo kernel > /cache/flashinfer/k.so")

    second = up(slot_env, "t-good2")  # same recipe and pins: same toolchain fingerprint
    assert second.returncode == 0, second.stderr
    assert "kept" in second.stderr
    assert shell(docker_engine, image, "cat /cache/flashinfer/k.so").strip() == "kernel"
    assert journal_events("cache.kept")

    # The volume now claims its kernels came from another CUDA toolkit.
    stored = json.loads(shell(docker_engine, image, f"cat /cache/{FINGERPRINT_FILE}"))
    stale = {**stored, "cuda": "12.8.1"}
    shell(docker_engine, image, f"echo '{json.dumps(stale)}' > /cache/{FINGERPRINT_FILE}")

    third = up(slot_env, "t-good")
    assert third.returncode == 0, third.stderr
    assert "wiped" in third.stderr and "cuda" in third.stderr
    assert shell(docker_engine, image, "ls /cache/flashinfer 2>/dev/null | wc -l").strip() == "0"
    wiped = journal_events("cache.wiped")[-1]
    assert wiped["differences"]["cuda"] == {"stored": "12.8.1", "new": stored["cuda"]}
    assert wiped["files_removed"] >= 2  # the kernel and the stale fingerprint
    assert json.loads(shell(docker_engine, image, f"cat /cache/{FINGERPRINT_FILE}")) == stored

    status = run_cli("cache", "status", "--cpu", "--json")
    assert status.returncode == 0, status.stderr
    state = json.loads(status.stdout)
    assert state["exists"] and state["fingerprint"] == stored and state["files"] == 0

    shell(docker_engine, image, "echo x > /cache/leftover")
    refused = run_cli("cache", "wipe", "--cpu", "--json")
    assert refused.returncode == 1 and "is running and using the cache" in refused.stderr
    from deploytool.host import labels

    for c in docker_engine.client.containers.list(
        filters={"label": f"{labels.INSTANCE}={labels.instance()}"}
    ):
        c.stop(timeout=5)
    wipe = run_cli("cache", "wipe", "--cpu", "--json")
    assert wipe.returncode == 0 and json.loads(wipe.stdout)["files_removed"] == 2
