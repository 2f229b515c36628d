"""Engine.run_throwaway, which reads and wipes the JIT cache volume: the script's whole output
once the container has exited, its failure with exit code and stderr, and nothing left behind."""

from __future__ import annotations

import secrets
import signal
import threading
import time

import docker.errors
import pytest
from conftest import BASE_IMAGE

from deploytool.errors import DeployError


def _left_behind(engine, mark: str) -> list[str]:
    """Containers, running or not, whose script carries `mark` (other tests' come and go meanwhile)."""
    # sparse: the list's own fields, no inspect of each (one removed meanwhile would fail it)
    return [
        c.id
        for c in engine.client.containers.list(all=True, sparse=True)
        if mark in c.attrs.get("Command", "")
    ]


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
        docker_engine.client.containers.run(
            BASE_IMAGE,
            ["mkdir", "/tmp/.deploytool-throwaway.out"],
            remove=True,
            network_mode="none",
            volumes={volume: {"bind": "/tmp", "mode": "rw"}},
        )
        with pytest.raises(
            DeployError, match=r"could not write /tmp/\.deploytool-throwaway\.out.*Is a directory"
        ):
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
            seen = [
                c
                for c in docker_engine.client.containers.list(
                    all=True, sparse=True, filters={"label": f"{labels.THROWAWAY}={labels.instance()}"}
                )
                if mark in c.attrs.get("Command", "")
            ]
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
    left = [
        c
        for c in docker_engine.client.containers.list(
            all=True, sparse=True, filters={"label": f"{labels.THROWAWAY}={labels.instance()}"}
        )
        if mark in c.attrs.get("Command", "")
    ]
    assert left == []
    done = docker_engine.run_argv(BASE_IMAGE, "echo", [mark], timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, mark)


class _Signal:
    """A real signal (SIGINT is a person's Ctrl-C), received by the main thread or by another
    thread of this process (the kernel gives a process's signal to any thread; Python raises it
    in the main thread either way), then a moment for Python to act on it."""

    def __init__(self, number: int, receiver: str):
        self.number, self.receiver = number, receiver
        self.other = threading.Thread(target=threading.Event().wait, args=(30,), daemon=True)
        self.other.start()

    def __call__(self) -> None:
        thread = threading.main_thread() if self.receiver == "main thread" else self.other
        signal.pthread_kill(thread.ident, self.number)
        time.sleep(0.3)  # an exception not held back is raised in here


def _signal_at(monkeypatch, moment: str, send: _Signal) -> None:
    """`send` just after the engine has made the container, before the client holds its handle
    ("made"), or just as the client asks the engine to remove it ("removed")."""
    from docker.models.containers import Container, ContainerCollection

    if moment == "made":
        create = ContainerCollection.create

        def create_then_signal(self, *args, **kwargs):
            made = create(self, *args, **kwargs)
            send()
            return made

        monkeypatch.setattr(ContainerCollection, "create", create_then_signal)
    else:
        remove = Container.remove

        def signal_then_remove(self, **kwargs):
            send()
            return remove(self, **kwargs)

        monkeypatch.setattr(Container, "remove", signal_then_remove)


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt meanwhile, as in a terminal's foreground job. A suite
    started in the background (`nohup make test &`, a checker's script) inherits SIGINT
    ignored, and Python keeps an ignored SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


needs_main_thread = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="a signal is raised in the main thread; this test runs in another",
)


@needs_main_thread
@pytest.mark.parametrize("receiver", ["main thread", "another thread"])
@pytest.mark.parametrize("moment", ["made", "removed"])
def test_a_ctrl_c_as_the_container_is_made_or_removed_leaves_none_behind(
    docker_engine, monkeypatch, ctrl_c_raises, moment, receiver
) -> None:
    # Raised while the engine makes the container, the Ctrl-C would leave it made and the client
    # without a handle to remove it by; raised as it is removed, it would cut the removal short.
    # Either way a container would be left holding the cache volume.
    mark = f"# throwaway-{secrets.token_hex(4)}"
    _signal_at(monkeypatch, moment, _Signal(signal.SIGINT, receiver))
    with pytest.raises(KeyboardInterrupt):
        docker_engine.run_throwaway(BASE_IMAGE, f"echo {mark}")
    assert _left_behind(docker_engine, mark) == []


@needs_main_thread
def test_a_sigterm_while_the_container_is_made_meets_the_handler_it_would_have_met(
    docker_engine, monkeypatch
) -> None:
    # deploytool's CLI turns SIGTERM into an exception; held back meanwhile, it reaches that
    # handler once the container is in hand, and the handler is in place again afterwards
    class Terminated(Exception):
        pass

    def terminated(_number, _frame):
        raise Terminated()

    mark = f"# throwaway-{secrets.token_hex(4)}"
    _signal_at(monkeypatch, "made", _Signal(signal.SIGTERM, "main thread"))
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        with pytest.raises(Terminated):
            docker_engine.run_throwaway(BASE_IMAGE, f"echo never {mark}")
        assert signal.getsignal(signal.SIGTERM) is terminated
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert _left_behind(docker_engine, mark) == []


def test_removing_a_volume_removes_the_throwaway_a_killed_process_left_on_it(docker_engine) -> None:
    # What a process killed between making a throwaway container and removing it leaves: the
    # container, never started, mounting the cache volume. The volume goes all the same.
    from deploytool.host import labels

    volume = f"{labels.name_prefix()}-throwaway-vol-{secrets.token_hex(4)}"
    docker_engine.client.volumes.create(volume, labels={labels.INSTANCE: labels.instance()})
    left = docker_engine.client.containers.create(
        BASE_IMAGE,
        ["true"],
        network_mode="none",
        volumes={volume: {"bind": "/cache", "mode": "rw"}},
        labels={labels.THROWAWAY: labels.instance()},
    )
    docker_engine.remove_volume(volume)
    assert not docker_engine.volume_exists(volume)
    with pytest.raises(docker.errors.NotFound):
        docker_engine.client.containers.get(left.id)


def test_a_volume_something_else_uses_is_refused_with_its_user_named(docker_engine) -> None:
    from deploytool.host import labels

    volume = f"{labels.name_prefix()}-throwaway-vol-{secrets.token_hex(4)}"
    name = f"{labels.name_prefix()}-volume-user-{secrets.token_hex(4)}"
    docker_engine.client.volumes.create(volume, labels={labels.INSTANCE: labels.instance()})
    # not a throwaway of this instance: a release, a person's container; it is never removed for them
    user = docker_engine.client.containers.run(
        BASE_IMAGE,
        ["sleep", "300"],
        detach=True,
        name=name,
        network_mode="none",
        labels={labels.INSTANCE: labels.instance()},
        volumes={volume: {"bind": "/cache", "mode": "rw"}},
    )
    try:
        with pytest.raises(DeployError, match=f"volume {volume} is still in use by {name}") as refused:
            docker_engine.remove_volume(volume)
        assert "docker rm -f" in refused.value.hint
        assert docker_engine.volume_exists(volume)
        assert docker_engine.client.containers.get(user.id).status == "running"
    finally:
        user.remove(force=True)
        docker_engine.client.volumes.get(volume).remove(force=True)
