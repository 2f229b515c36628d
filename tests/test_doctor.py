"""`deploytool doctor`: the real checks on this host, and each verdict's rule with a stand-in
for the one thing a CI machine cannot change (the NVIDIA driver, an unreachable engine)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploytool.cli import app
from deploytool.deploy import doctor
from deploytool.profiles import ProfileStore


class FakeNvml:
    """NVML of a host with one GPU and a given driver."""

    def __init__(self, driver: str, cuda: int = 13030):
        self.driver = driver
        self.cuda = cuda  # nvmlSystemGetCudaDriverVersion: 13030 is CUDA 13.3

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return self.driver.encode()

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda


class NoNvml(FakeNvml):
    def nvmlInit(self) -> None:
        raise RuntimeError("NVML Shared Library Not Found")


def test_real_host_report(docker_engine, deploytool_home: Path) -> None:
    report = doctor.run_doctor()
    checks = {c.name: c for c in report.checks}
    assert list(checks) == [
        "docker engine",
        "compose plugin",
        "nvidia container runtime",
        "nvidia driver",
        "disk for images",
        "disk for caches",
        "state directory",
        "open releases",
    ]
    assert checks["docker engine"].status == "pass"
    assert checks["open releases"].status in ("pass", "warn")  # other people's releases may be open
    assert checks["docker engine"].data["version"] == docker_engine.server_version
    assert checks["compose plugin"].status == "pass"
    assert (
        checks["compose plugin"].data["version"].startswith(docker_engine.compose_version().lstrip("v")[:4])
    )
    assert checks["state directory"].status == "pass" and checks["state directory"].data["path"] == str(
        deploytool_home
    )
    assert checks["disk for caches"].data["free_gib"] > 0
    assert report.ok == all(c.status != "fail" for c in report.checks)


def test_driver_against_each_profiles_cuda() -> None:
    profiles = ProfileStore().all()
    ok = doctor.check_driver(FakeNvml("595.58.03"), profiles)
    assert ok.status == "pass" and ok.data["table"][0]["cuda"] == "13.3.1"
    assert "rtx5090-qwen3.6-35b-a3b-nvfp4" in ok.data["table"][0]["profiles"]
    old = doctor.check_driver(FakeNvml("570.86.10"), profiles)
    assert old.status == "fail" and "needs driver >= 580.65.06" in old.detail
    none = doctor.check_driver(NoNvml("x"), profiles)
    assert none.status == "warn" and "NVML" in none.detail


def test_unreachable_engine_and_readonly_state_fail(tmp_path: Path) -> None:
    class DeadEngine:
        def ping(self) -> None:
            raise ConnectionError("connection refused")

    engine, info = doctor.check_engine(DeadEngine())
    assert engine.status == "fail" and "connection refused" in engine.detail and info == {}
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o500)
    try:
        if os.access(readonly, os.W_OK):  # root ignores the mode: use a path under a file instead
            target = tmp_path / "a-file"
            target.write_text("x")
            readonly = target / "state"
        assert doctor.check_state_dir(readonly).status == "fail"
    finally:
        (tmp_path / "ro").chmod(0o700)


def test_disk_thresholds(tmp_path: Path) -> None:
    assert doctor.check_disk("d", tmp_path, 0.0, 0.0, hint="h").status == "pass"
    assert doctor.check_disk("d", tmp_path / "not" / "yet", 1e9, 0.0, hint="h").status == "warn"
    assert doctor.check_disk("d", tmp_path, 1e9, 1e9, hint="h").status == "fail"


def test_nvidia_runtime_or_cdi_spec(tmp_path: Path) -> None:
    assert doctor.check_nvidia_runtime({"Runtimes": {"runc": {}, "nvidia": {}}}, ()).status == "pass"
    assert doctor.check_nvidia_runtime({"Runtimes": {"runc": {}}}, ()).status == "warn"
    spec = tmp_path / "nvidia.yaml"
    spec.write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    cdi = doctor.check_nvidia_runtime({"Runtimes": {"runc": {}}}, (str(tmp_path / "*.yaml"),))
    assert cdi.status == "pass" and str(spec) in cdi.detail


def test_cli_json_and_exit_code(docker_engine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["doctor", "--json"])
    data = json.loads(result.stdout)
    assert result.exit_code == (0 if data["ok"] else 1)
    assert sum(data["counts"].values()) == len(data["checks"]) == 8

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("DEPLOYTOOL_HOME", str(blocker / "state"))  # cannot be created: a fail
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 1
    assert "state directory" in result.stdout and "fail" in result.stdout


# -- regressions -------------------------------------------------------------------------------
def _with_cuda(profile, cuda: str):
    return profile.model_copy(update={"image": profile.image.model_copy(update={"cuda": cuda})})


def test_driver_cuda_older_than_a_profiles_cuda_warns() -> None:
    profiles = ProfileStore().all()
    old_cuda = doctor.check_driver(FakeNvml("580.95.05", cuda=13000), profiles)  # meets min_driver, CUDA 13.0
    assert old_cuda.status == "warn" and "supports CUDA 13.0, older than CUDA 13.3" in old_cuda.detail
    assert old_cuda.data["driver_cuda"] == "13.0" and old_cuda.data["table"][0]["driver_cuda_ok"] is False
    same = doctor.check_driver(FakeNvml("595.58.03", cuda=13030), profiles)
    assert same.status == "pass" and same.data["table"][0]["driver_cuda_ok"] is True


def test_an_unknown_cuda_is_reported_as_unknown_not_too_old() -> None:
    card = ProfileStore().get("rtx5090-qwen3.6-35b-a3b-nvfp4")
    check = doctor.check_driver(FakeNvml("595.58.03"), [_with_cuda(card, "13.9.1")])
    assert check.status == "warn" and "CUDA 13.9.1 is unknown" in check.detail
    assert "needs driver" not in check.detail and check.data["table"][0]["ok"] is None

    class OldNvml(FakeNvml):  # an NVML without nvmlSystemGetCudaDriverVersion
        def nvmlSystemGetCudaDriverVersion(self) -> int:
            raise AttributeError("nvmlSystemGetCudaDriverVersion")

    unknown = doctor.check_driver(OldNvml("595.58.03"), [card])
    assert unknown.status == "warn" and "CUDA version of the driver is unknown" in unknown.detail
    assert "needs driver" not in unknown.detail


def test_engine_checks_say_unknown_when_the_engine_is_unreachable(tmp_path: Path) -> None:
    class DeadEngine:
        def ping(self) -> None:
            raise ConnectionError("connection refused")

    spec = tmp_path / "nvidia.yaml"
    spec.write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    report = doctor.run_doctor(
        docker_client=DeadEngine(),
        nvml=FakeNvml("595.58.03"),
        state_dir=tmp_path / "state",
        profiles=[],
        cdi_globs=(str(tmp_path / "*.yaml"),),
    )
    checks = {c.name: c for c in report.checks}
    assert checks["docker engine"].status == "fail"
    for name in ("nvidia container runtime", "disk for images", "open releases"):
        assert checks[name].detail == "unknown (engine unreachable)", checks[name]
        assert checks[name].status == "warn"
    assert checks["disk for caches"].status != "fail" and checks["state directory"].status == "pass"
