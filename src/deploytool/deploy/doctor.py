"""`deploytool doctor`: is this host ready to build and deploy? Each check is pass, warn or
fail with what was found and what to do; a fail makes the command exit non-zero.

Checks: the Docker engine (reachable, version), the compose plugin (>= 2.20, for the
healthcheck's start_interval), the NVIDIA container runtime or a CDI spec, NVML and the
driver against the minimum driver of each profile's CUDA (images/versions.yaml) and the
driver's own CUDA version against each profile's CUDA major.minor, free disk for images and
for caches, a writable state directory, and deploytool releases that listen beyond loopback
without an API key (anyone on the network could use them). Checks that need the engine say "unknown (engine unreachable)"
when it does not answer.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..host.nvml import STANDIN_ENV
from ..image.versions import load_matrix, version_tuple
from ..profiles import Profile, ProfileStore
from .about import About, about

Status = Literal["pass", "warn", "fail"]

MIN_COMPOSE = (2, 20, 0)  # healthcheck start_interval
MIN_ENGINE = (25, 0, 0)  # start_interval is honoured from Engine 25
# A CUDA sglang image is 20-30 GB and a build needs as much again; kernel caches a few GB.
IMAGE_DISK_WARN_GIB, IMAGE_DISK_FAIL_GIB = 60.0, 20.0
CACHE_DISK_WARN_GIB, CACHE_DISK_FAIL_GIB = 20.0, 5.0
CDI_GLOBS = ("/etc/cdi/*.yaml", "/etc/cdi/*.json", "/var/run/cdi/*.yaml", "/var/run/cdi/*.json")


@dataclass
class Check:
    name: str
    status: Status
    detail: str
    hint: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class DoctorReport:
    checks: list[Check]
    # which deploytool looked (its version, data folder, SGLang releases): a report names it
    about: About | None = None

    @property
    def ok(self) -> bool:
        return not any(c.status == "fail" for c in self.checks)

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in ("pass", "warn", "fail")}


def run_doctor(
    *,
    docker_client: Any = None,
    nvml: Any = None,
    state_dir: Path | None = None,
    profiles: list[Profile] | None = None,
    cdi_globs: tuple[str, ...] = CDI_GLOBS,
) -> DoctorReport:
    """Every check; arguments stand in for the host's engine, NVML, state dir and profiles."""
    checks: list[Check] = []
    engine_check, info, client = _engine_and_client(docker_client)
    checks.append(engine_check)
    checks.append(check_compose())
    unreachable = engine_check.status == "fail"  # check_engine fails only when the engine does not answer
    checks.append(
        _unknown_without_engine("nvidia container runtime")
        if unreachable
        else check_nvidia_runtime(info, cdi_globs)
    )
    if profiles is None:
        try:
            profiles = ProfileStore().all()
        except Exception as exc:  # a broken profile must not hide the host's state
            checks.append(Check("profiles", "warn", f"profiles could not be read: {exc}"))
            profiles = []
    checks.append(check_driver(nvml, profiles))
    home = state_dir or _state_home()
    checks.append(
        _unknown_without_engine("disk for images")
        if unreachable
        else check_disk(
            "disk for images",
            Path(info.get("DockerRootDir") or "/var/lib/docker"),
            IMAGE_DISK_WARN_GIB,
            IMAGE_DISK_FAIL_GIB,
            hint="free space or move the engine's data-root (daemon.json)",
        )
    )
    checks.append(
        check_disk(
            "disk for caches",
            home,
            CACHE_DISK_WARN_GIB,
            CACHE_DISK_FAIL_GIB,
            hint="free space or point DEPLOYTOOL_HOME at a larger disk",
        )
    )
    checks.append(check_state_dir(home))
    checks.append(_unknown_without_engine("open releases") if unreachable else check_open_releases(client))
    return DoctorReport(checks=checks, about=about())


def _engine_and_client(client: Any) -> tuple[Check, dict[str, Any], Any]:
    if client is None:
        try:
            from ..host.engine import Engine

            client = Engine().client  # the one door to Docker; unreachable raises EngineUnavailable
        except Exception:
            client = None
    check, info = check_engine(client) if client is not None else check_engine()
    return check, info, client


def check_open_releases(client: Any) -> Check:
    """Running deploytool releases (any instance) published beyond loopback without an API key:
    anyone who reaches the host can call them."""
    from ..host import labels
    from ..release.inputs import beyond_loopback

    try:
        containers = client.containers.list(filters={"label": f"{labels.MANAGED}=true"})
    except Exception as exc:
        return Check("open releases", "warn", f"cannot list containers ({_short(exc)})")
    open_ones = []
    for container in containers:
        lab = container.labels or {}
        ip = lab.get(labels.HOST_IP, "127.0.0.1")
        if beyond_loopback(ip) and lab.get(labels.API_KEY) != "required":
            open_ones.append(
                f"{container.name} (slot {lab.get(labels.SLOT, '?')}, release {lab.get(labels.RELEASE, '?')}, "
                f"{ip}:{lab.get(labels.HOST_PORT, '?')}, instance {lab.get(labels.INSTANCE, '?')})"
            )
    if open_ones:
        return Check(
            "open releases",
            "warn",
            f"{len(open_ones)} release(s) listen beyond loopback without an API key: {'; '.join(open_ones)}",
            hint="set server.api_key in the profile and `deploytool up` again, or publish on 127.0.0.1 "
            "(--bind) behind a gateway",
            data={"releases": open_ones},
        )
    return Check(
        "open releases",
        "pass",
        f"no running release listens beyond loopback without an API key ({len(containers)} running)",
        data={"releases": []},
    )


def _unknown_without_engine(name: str) -> Check:
    """A check that asks the engine (its runtimes, its data root) when the engine does not answer."""
    return Check(
        name,
        "warn",
        "unknown (engine unreachable)",
        hint="start the Docker engine and run doctor again",
        data={"unknown": True},
    )


def _state_home() -> Path:
    root = os.environ.get("DEPLOYTOOL_HOME")
    return (
        Path(root)
        if root
        else Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local/state")) / "deploytool"
    )


def check_engine(client: Any = None) -> tuple[Check, dict[str, Any]]:
    try:
        if client is None:
            from ..host.engine import Engine

            client = Engine().client  # pings; unreachable raises EngineUnavailable
        client.ping()
        version = client.version()
        info = client.info()
    except Exception as exc:
        return Check(
            "docker engine",
            "fail",
            f"not reachable ({_short(exc)})",
            hint="start a Docker Engine >= 25 (see docs/install.md) or set DOCKER_HOST",
        ), {}
    text = str(version.get("Version", "?"))
    status: Status = "pass" if version_tuple(text)[:3] >= MIN_ENGINE else "warn"
    return Check(
        "docker engine",
        status,
        f"Engine {text}, API {version.get('ApiVersion', '?')}",
        hint=None if status == "pass" else "Engine >= 25 honours the healthcheck's start_interval",
        data={"version": text},
    ), info


def check_compose() -> Check:
    from ..host.engine import compose_plugin_version

    if shutil.which("docker") is None:
        return Check(
            "compose plugin",
            "fail",
            "the `docker` command is not on PATH",
            hint="install the docker CLI with the compose v2 plugin",
        )
    try:
        version = compose_plugin_version()
    except subprocess.TimeoutExpired:
        return Check("compose plugin", "fail", "`docker compose version` did not answer")
    if version is None:
        return Check(
            "compose plugin",
            "fail",
            "the compose v2 plugin is missing",
            hint="install docker-compose-plugin (>= 2.20)",
        )
    text = version.lstrip("v")
    if version_tuple(text)[:3] < MIN_COMPOSE:
        return Check(
            "compose plugin",
            "fail",
            f"compose {text} is older than 2.20",
            hint="healthcheck start_interval needs compose >= 2.20: upgrade the plugin",
            data={"version": text},
        )
    return Check("compose plugin", "pass", f"compose {text}", data={"version": text})


def check_nvidia_runtime(info: dict[str, Any], cdi_globs: tuple[str, ...] = CDI_GLOBS) -> Check:
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    cdi_files = [f for pattern in cdi_globs for f in glob.glob(pattern) if _mentions_nvidia(Path(f))]
    found = []
    if "nvidia" in runtimes:
        found.append("nvidia runtime")
    if cdi_files:
        found.append("CDI spec " + ", ".join(cdi_files))
    if found:
        return Check(
            "nvidia container runtime",
            "pass",
            "; ".join(found),
            data={"runtimes": runtimes, "cdi": cdi_files},
        )
    return Check(
        "nvidia container runtime",
        "warn",
        f"no nvidia runtime (engine runtimes: {', '.join(runtimes) or 'none'}) and no nvidia CDI spec",
        hint="GPU slots need the NVIDIA Container Toolkit (nvidia-ctk runtime configure, or "
        "nvidia-ctk cdi generate); --cpu slots work without it",
        data={"runtimes": runtimes, "cdi": []},
    )


def _mentions_nvidia(path: Path) -> bool:
    try:
        return "nvidia.com/gpu" in path.read_text(errors="replace")
    except OSError:
        return False


@dataclass(frozen=True)
class _Driver:
    """What NVML says of the driver."""

    version: str
    gpus: int
    cuda: tuple[int, int] | None  # the newest CUDA it supports; None when NVML did not say


def check_driver(nvml: Any, profiles: list[Profile]) -> Check:
    """The driver against the minimum driver of each CUDA that a profile's image uses."""
    if nvml is None:
        from ..errors import DeploytoolError
        from ..host.nvml import (
            nvml_library,
        )  # the driver's NVML, or a described host's (DEPLOYTOOL_NVML_STANDIN)

        try:
            nvml = nvml_library()
        except DeploytoolError as exc:  # a described host whose file cannot be read: a finding, not a crash
            return Check("nvidia driver", "fail", exc.message, hint=exc.hint)
        if nvml is None:
            return Check(
                "nvidia driver", "warn", "nvidia-ml-py is not installed", hint="pip install nvidia-ml-py"
            )
    read = _read_driver(nvml)
    if isinstance(read, Check):
        return read
    driver, count, driver_cuda = read.version, read.gpus, read.cuda
    needs: dict[str, list[str]] = {}
    for p in profiles:
        if p.image.cuda:
            needs.setdefault(p.image.cuda, []).append(p.name)
    table, too_old, notes = _cuda_fits(read, needs)
    data = {
        "driver": driver,
        "driver_cuda": None if driver_cuda is None else f"{driver_cuda[0]}.{driver_cuda[1]}",
        "gpus": count,
        "table": table,
    }
    described = getattr(nvml, "described_host", None)  # the stand-in NVML over a host file
    if described:
        data["described_host"] = described
    if driver_cuda is None and needs:
        notes.append("the CUDA version of the driver is unknown (NVML did not say)")
    if described:
        # every figure is the host file's, not this machine's: said first, and never a pass
        return Check(
            "nvidia driver",
            "fail" if too_old and len(too_old) == len(table) else "warn",
            f"the host is described by {STANDIN_ENV}={described}, not read from this machine's driver: "
            f"driver {driver}, {count} GPU(s)" + "".join(f"; {n}" for n in too_old + notes),
            hint=f"unset {STANDIN_ENV} to check this machine's driver",
            data=data,
        )
    if too_old:
        status: Status = "fail" if len(too_old) == len(table) else "warn"
        return Check(
            "nvidia driver",
            status,
            f"driver {driver}, {count} GPU(s); " + "; ".join(too_old + notes),
            hint="upgrade the NVIDIA driver to run those profiles",
            data=data,
        )
    if notes:
        return Check(
            "nvidia driver",
            "warn",
            f"driver {driver}, {count} GPU(s); " + "; ".join(notes),
            hint="upgrade the NVIDIA driver, or add the CUDA to images/versions.yaml",
            data=data,
        )
    return Check(
        "nvidia driver",
        "pass",
        f"driver {driver}, {count} GPU(s); fits CUDA {', '.join(sorted(needs)) or '(no GPU profile)'}",
        data=data,
    )


def _read_driver(nvml: Any) -> _Driver | Check:
    """The driver's version, card count and CUDA through NVML; a warning when there is none."""
    try:
        nvml.nvmlInit()
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
            count = int(nvml.nvmlDeviceGetCount())
            try:  # e.g. 13000 for CUDA 13.0: the newest CUDA this driver supports
                raw_cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
                driver_cuda: tuple[int, int] | None = (raw_cuda // 1000, raw_cuda % 1000 // 10)
            except Exception:
                driver_cuda = None
        finally:
            nvml.nvmlShutdown()
    except Exception as exc:
        return Check(
            "nvidia driver",
            "warn",
            f"no NVIDIA driver or NVML ({_short(exc)})",
            hint="GPU profiles need the NVIDIA driver; --cpu slots work without it",
        )
    return _Driver(driver, count, driver_cuda)


def _cuda_fits(
    read: _Driver, needs: dict[str, list[str]]
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Each CUDA the profiles (`needs`: CUDA -> profile names) use against the driver: the table
    `--json` shows, what the driver is too old for, and the warnings (an unknown CUDA, a driver
    CUDA older than a profile's)."""
    driver, driver_cuda = read.version, read.cuda
    matrix = load_matrix()
    table = []
    too_old = []
    notes = []
    for cuda, names in sorted(needs.items()):
        row = matrix.cuda_row(cuda)
        minimum = row.min_driver if row else None
        fits = None if minimum is None else version_tuple(driver) >= version_tuple(minimum)
        wanted = version_tuple(cuda)[:2]
        cuda_fits = None if driver_cuda is None or len(wanted) < 2 else driver_cuda >= wanted
        table.append(
            {
                "cuda": cuda,
                "min_driver": minimum,
                "ok": fits,
                "driver_cuda_ok": cuda_fits,
                "profiles": sorted(names),
            }
        )
        who = ", ".join(sorted(names))
        if fits is None:
            notes.append(
                f"CUDA {cuda} is unknown (not in the version matrix), its minimum driver too ({who})"
            )
        elif not fits:
            too_old.append(f"CUDA {cuda} needs driver >= {minimum} ({who})")
        elif cuda_fits is False and driver_cuda is not None:
            notes.append(
                f"the driver supports CUDA {driver_cuda[0]}.{driver_cuda[1]}, older than CUDA "
                f"{'.'.join(map(str, wanted))}: kernels built as PTX by that toolkit will not load ({who})"
            )
    return table, too_old, notes


def check_disk(name: str, path: Path, warn_gib: float, fail_gib: float, *, hint: str) -> Check:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError as exc:
        return Check(name, "warn", f"cannot read free space of {path}: {exc.strerror}")
    free = usage.free / 2**30
    detail = f"{free:.0f} GiB free at {probe}"
    data = {"path": str(probe), "free_gib": round(free, 1)}
    if free < fail_gib:
        return Check(name, "fail", f"{detail} (< {fail_gib:g} GiB)", hint=hint, data=data)
    if free < warn_gib:
        return Check(name, "warn", f"{detail} (< {warn_gib:g} GiB recommended)", hint=hint, data=data)
    return Check(name, "pass", detail, data=data)


def check_state_dir(path: Path) -> Check:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-", delete=True) as handle:
            handle.write(b"ok")
            handle.flush()
    except OSError as exc:
        return Check(
            "state directory",
            "fail",
            f"{path} is not writable ({exc.strerror})",
            hint="set DEPLOYTOOL_HOME to a writable folder",
        )
    return Check("state directory", "pass", f"{path} is writable", data={"path": str(path)})


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 160 else text[:157] + "..."
