"""Engine.run_throwaway, which reads and wipes the JIT cache volume: the script's whole output
once the container has exited, its failure with exit code and stderr, and nothing left behind."""

from __future__ import annotations

import secrets

import pytest

from conftest import BASE_IMAGE
from deploytool.errors import DeployError


def _left_behind(engine, mark: str) -> list[str]:
    """Containers, running or not, whose script carries `mark` (other tests' come and go meanwhile)."""
    # sparse: the list's own fields, no inspect of each (one removed meanwhile would fail it)
    return [c.id for c in engine.client.containers.list(all=True, sparse=True) if mark in c.attrs.get("Command", "")]


def test_a_script_that_prints_and_exits_at_once_returns_all_it_printed(docker_engine) -> None:
    mark = f"# throwaway-{secrets.token_hex(4)}"
    # A container that exits as soon as it has printed is the one whose log can come back empty
    # on a loaded engine; twenty in a row, each answer must be whole.
    for n in range(20):
        out = docker_engine.run_throwaway(BASE_IMAGE, f"seq 1 {n + 1}; echo to-stderr >&2 {mark}")
        assert out.split() == [str(i) for i in range(1, n + 2)]  # stdout only
    assert _left_behind(docker_engine, mark) == []


def test_a_failing_script_raises_with_its_exit_code_and_output(docker_engine) -> None:
    mark = f"# throwaway-{secrets.token_hex(4)}"
    with pytest.raises(DeployError, match=r"failed \(exit 3\): .*no such thing"):
        docker_engine.run_throwaway(BASE_IMAGE, f"echo no such thing >&2; exit 3 {mark}")
    assert _left_behind(docker_engine, mark) == []
    with pytest.raises(DeployError, match="is not on this engine"):
        docker_engine.run_throwaway("deploytool/not-an-image:nowhere", "true")
    # A script that reports its trouble on stdout only is heard too.
    with pytest.raises(DeployError, match=r"failed \(exit 4\): .*said on stdout"):
        docker_engine.run_throwaway(BASE_IMAGE, f"echo said on stdout; exit 4 {mark}")


def test_a_script_whose_output_file_cannot_be_written_fails_with_what_the_shell_said(docker_engine) -> None:
    # The shell opens the output file before the script runs; a /tmp it cannot write (an image
    # run as a user without the right) leaves no file, and the shell's own complaint is in the log.
    mark = f"# throwaway-{secrets.token_hex(4)}"
    volume = f"deploytool-test-throwaway-{secrets.token_hex(4)}"
    docker_engine.client.volumes.create(volume)
    try:
        # /tmp replaced by a volume holding a directory where the output file would be
        docker_engine.client.containers.run(BASE_IMAGE, ["mkdir", "/tmp/.deploytool-throwaway.out"], remove=True,
                                            network_mode="none", volumes={volume: {"bind": "/tmp", "mode": "rw"}})
        with pytest.raises(DeployError, match=r"could not write /tmp/\.deploytool-throwaway\.out.*Is a directory"):
            docker_engine.run_throwaway(BASE_IMAGE, f"echo never read {mark}", volume=volume, mount="/tmp")
    finally:
        docker_engine.client.volumes.get(volume).remove(force=True)
    assert _left_behind(docker_engine, mark) == []


def test_a_running_throwaway_container_is_labelled_with_its_instance(docker_engine) -> None:
    # The label is how a clean-up (.ci/run's) finds one that a killed process left behind.
    import threading
    import time

    from deploytool.host import labels

    mark = f"# throwaway-{secrets.token_hex(4)}"
    worker = threading.Thread(target=docker_engine.run_throwaway, args=(BASE_IMAGE, f"sleep 4 {mark}"))
    worker.start()
    try:
        deadline, seen = time.monotonic() + 30, []
        while not seen and time.monotonic() < deadline and worker.is_alive():
            seen = [c for c in docker_engine.client.containers.list(
                        all=True, sparse=True, filters={"label": f"{labels.THROWAWAY}={labels.instance()}"})
                    if mark in c.attrs.get("Command", "")]
            time.sleep(0.2)
        assert len(seen) == 1
    finally:
        worker.join(timeout=60)
    assert _left_behind(docker_engine, mark) == []


def test_a_command_container_that_outlives_its_timeout_is_removed(docker_engine) -> None:
    # killing `docker run` at the timeout does not stop its container; run_argv removes it by name
    from deploytool.host import labels

    mark = f"argv-{secrets.token_hex(4)}"
    with pytest.raises(DeployError, match=r"did not finish within 3 s \(removed\)"):
        docker_engine.run_argv(BASE_IMAGE, "sh", ["-c", f"sleep 60 # {mark}"], timeout=3)
    left = [c for c in docker_engine.client.containers.list(
                all=True, sparse=True, filters={"label": f"{labels.THROWAWAY}={labels.instance()}"})
            if mark in c.attrs.get("Command", "")]
    assert left == []
    done = docker_engine.run_argv(BASE_IMAGE, "echo", [mark], timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, mark)
