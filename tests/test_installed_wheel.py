"""deploytool as a user installs a Python tool: the sdist and wheel built from this tree, the wheel
installed into a new virtual environment in a folder outside the checkout, and the commands that
read deploytool's data (profiles, image recipes, the compose document, qualify's data) run from
there, the reference runtime's image built from the installed package data. Then the qualify
image (images/qualify/Dockerfile, the image the Kubernetes qualify Job runs) is built from that
wheel and qualifies the same release, as the Job's user, on a read-only root.

Dependencies: the new environment gets deploytool's dependencies by a path line to this tree's
environment's site-packages (`make setup` installed exactly those, at the versions the rest of
the suite runs), not from a package index: what differs between the tree and a wheel is the
wheel's own content (the package, its data, its entry point and metadata), and that is what is
installed and checked here (`pip check` proves every requirement the wheel declares is met);
downloading and installing pandas, matplotlib and the rest again on every run would prove
nothing of deploytool's and cost minutes. A path line in a .pth file is not a site folder:
the tree's own editable install (its .pth pointing at src/) is not processed, so the tree's
source cannot stand in for the wheel (each command's output is checked to come from the
environment)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, free_port, remove_this_instance, shared_test_cache

pytestmark = pytest.mark.timeout(900)

DATA = ("profiles", "images", "compose", "qualify")
QUALIFY_SUITES = ("--suite", "preflight", "--suite", "contract", "--suite", "tools", "--suite", "vision")


def _built(tmp: Path) -> tuple[Path, Path]:
    """The sdist and the wheel, as `python -m build` makes them: the sdist first, then the
    wheel from the unpacked sdist (so the sdist is proven to hold what the wheel needs). No
    isolation: the backend (hatchling) is installed in the tree's environment, no index."""
    out = tmp / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out.glob("deploytool-*.tar.gz")
    (wheel,) = out.glob("deploytool-*.whl")
    return sdist, wheel


def _venv(tmp: Path, wheel: Path) -> Path:
    """A new environment outside the checkout with the wheel installed; deploytool's
    dependencies through a path line to the tree's environment (the module's docstring)."""
    env_dir = tmp / "tool-env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "tree-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    proc = subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--no-compile", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return env_dir


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("wheel")
    assert not tmp.resolve().is_relative_to(ROOT)
    sdist, wheel = _built(tmp)
    env_dir = _venv(tmp, wheel)
    workdir = tmp / "elsewhere"  # a folder of the user's, nowhere near the checkout
    workdir.mkdir()
    return {"sdist": sdist, "wheel": wheel, "env": env_dir, "cwd": workdir}


def _tool(installed: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH and the like of the tree's run stay out: the command sees the environment alone
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DEPLOYTOOL_RESOURCES")}
    return subprocess.run(
        [str(installed["env"] / "bin" / "deploytool"), *args],
        cwd=installed["cwd"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_wheel_and_sdist_hold_the_package_and_its_data_and_nothing_of_tests_or_docs(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    for folder in DATA:
        shipped = {n for n in names if n.startswith(f"deploytool/_data/{folder}/")}
        in_tree = {
            f"deploytool/_data/{p.relative_to(ROOT).as_posix()}"
            for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }
        assert in_tree and shipped == in_tree, folder
    assert "deploytool/templates/qualify.html.j2" in names and "deploytool/data/gsm8k/test.jsonl" in names
    assert not [
        n
        for n in names
        if n.split("/")[0] in ("tests", "docs", "benchmarks", "scripts")
        or "__pycache__" in n
        or n.endswith(".pyc")
    ]
    with tarfile.open(installed["sdist"]) as sdist:
        top = {Path(m.name).parts[1] for m in sdist.getmembers() if len(Path(m.name).parts) > 1}
    assert {"src", *DATA, "pyproject.toml", "README.md"} <= top


def test_the_installed_tool_finds_its_data_and_plans(installed):
    env = installed["env"]
    check = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "check"],
        capture_output=True,
        text=True,
    )
    assert "deploytool" not in check.stdout, check.stdout  # every requirement the wheel declares is met

    version = _tool(installed, "--version")
    assert version.returncode == 0, version.stderr
    from deploytool import __version__

    lines = version.stdout.splitlines()
    assert lines[0] == f"deploytool {__version__}"
    assert "0.5.23" in lines[1] and "0.5.17" in lines[1]
    assert lines[2].startswith(f"data: {env}") and lines[2].endswith("(package data)"), lines

    listed = _tool(installed, "profiles", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)["profiles"]}
    assert {"sim", "rtx5090-qwen3.6-35b-a3b-nvfp4", "h200-qwen3.6-35b-a3b-fp8"} <= set(rows)
    assert all(r["origin"] == "built-in" and r["source"].startswith(str(env)) for r in rows.values())

    plan = _tool(installed, "plan-memory", "--profile", "rtx5090-qwen3.6-35b-a3b-nvfp4", "--json")
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert planned["verdict"] == "fits" and planned["pool_tokens"] > 100_000, planned


@pytest.fixture(scope="module")
def sim_release(installed, docker_engine_module):
    """`up --cpu --profile sim` by the installed tool: the sim image built from package data."""
    port = free_port()
    up = _tool(installed, "up", "--cpu", "--profile", "sim", "--port", str(port), "--skip-qualify", "--json")
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        yield {"port": port, "up": json.loads(up.stdout)}
    finally:
        down = _tool(installed, "down", "--cpu", "--volumes", "--json")
        remove_this_instance(docker_engine_module.client)
        assert down.returncode == 0, down.stderr


@pytest.fixture(scope="module")
def docker_engine_module():
    from conftest import engine_problem

    problem = engine_problem()
    if problem:
        pytest.skip(problem)
    from deploytool.host.engine import Engine

    return Engine()


@pytest.mark.docker
def test_up_from_the_installed_wheel_serves_and_qualifies(installed, sim_release, docker_engine_module):
    port = sim_release["port"]
    assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    # the image was made from the installed package: its copy of deploytool holds the wheel's data
    found = docker_engine_module.run_throwaway(
        sim_release["up"]["image"],
        "/opt/venv/bin/python -c \"from deploytool.resources import data_origin; print(*data_origin(), sep='|')\"",
    ).strip()
    assert found == "/opt/deploytool/deploytool/_data|package data"

    report = installed["cwd"] / "qualify-report"
    qualified = _tool(
        installed,
        "qualify",
        "--url",
        f"http://127.0.0.1:{port}",
        "--profile",
        "sim",
        *QUALIFY_SUITES,
        "--limit",
        "4",
        "--no-progress",
        "--report",
        str(report),
        "--json",
    )
    assert qualified.returncode == 0, qualified.stdout[-3000:] + qualified.stderr[-3000:]
    assert json.loads(qualified.stdout)["verdict"] == "passed"
    from deploytool import __version__

    assert f"Written by deploytool {__version__}." in (report / "report.md").read_text()


# One image of this test's on the engine, replaced by each build: a later run with the same wheel
# and dependencies takes every layer from the engine's cache (its pip install is most of a build).
QUALIFY_IMAGE = "deploytool-qualify-test:latest"


@pytest.mark.docker
@pytest.mark.index
def test_the_qualify_image_qualifies_the_release_as_the_job_runs_it(
    installed, sim_release, docker_engine_module
):
    """images/qualify/Dockerfile, built as kubernetes.md says (the wheel and its dependencies'
    wheels in the context; here from deploytool's test cache, with no index), runs the Job's
    command as the Job's user on a read-only root against the reference runtime."""
    context = installed["cwd"] / "qualify-image"
    wheels = context / "wheels"
    wheels.mkdir(parents=True)
    shutil.copy2(installed["wheel"], wheels)
    for wheel in _dependency_wheels(installed["wheel"]).glob("*.whl"):
        os.link(wheel, wheels / wheel.name)
    shutil.copy2(ROOT / "images" / "qualify" / "Dockerfile", context / "Dockerfile")
    client = docker_engine_module.client
    before = _image_id(client, QUALIFY_IMAGE)
    build = subprocess.run(
        [
            "docker",
            "build",
            "--quiet",
            "--build-arg",
            "BASE=deploytool/base:bookworm",
            "--build-arg",
            "PIP_OPTIONS=--no-index",
            "-t",
            QUALIFY_IMAGE,
            str(context),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    if before and before != _image_id(client, QUALIFY_IMAGE):
        subprocess.run(["docker", "image", "rm", before], capture_output=True)  # the one it replaced
    run = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "host",
            "--user",
            "65534:65534",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "-e",
            "HOME=/tmp",
            "-e",
            "DEPLOYTOOL_HOME=/tmp/deploytool",
            QUALIFY_IMAGE,
            "deploytool",
            "qualify",
            "--url",
            f"http://127.0.0.1:{sim_release['port']}",
            "--profile",
            "sim",
            *QUALIFY_SUITES,
            "--limit",
            "4",
            "--no-progress",
            "--report",
            "/tmp/qualify-report",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert json.loads(run.stdout)["verdict"] == "passed"
    python3 = subprocess.run(
        ["docker", "run", "--rm", QUALIFY_IMAGE, "python3", "-c", "import os; print(os.getuid())"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert python3.stdout.strip() == "65534", python3.stderr  # the init container's python3, as nobody


def _image_id(client, tag: str) -> str | None:
    import docker

    try:
        return client.images.get(tag).id
    except docker.errors.ImageNotFound:
        return None


def _dependency_wheels(wheel: Path) -> Path:
    """The wheels of deploytool's core dependencies for the base image's Python 3.11, downloaded
    once into the shared test cache (the same requirements make the same folder)."""
    from filelock import FileLock

    from deploytool.image.recipes.sim import _platforms

    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        requires = [
            line.split(":", 1)[1].strip()
            for line in archive.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line
        ]
    import hashlib

    house = (
        shared_test_cache()
        / "qualify-image-wheels"
        / hashlib.sha256("\n".join(requires).encode()).hexdigest()[:16]
    )
    with FileLock(f"{house}.lock"):
        if not (house / ".complete").exists():
            house.mkdir(parents=True, exist_ok=True)
            import platform

            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--only-binary=:all:",
                    "--dest",
                    str(house),
                    "--python-version",
                    "3.11",
                    "--implementation",
                    "cp",
                    *(arg for tag in _platforms(platform.machine()) for arg in ("--platform", tag)),
                    *requires,
                ],
                capture_output=True,
                text=True,
                timeout=900,
            )
            if proc.returncode != 0:
                pytest.skip(
                    f"the qualify image's dependency wheels cannot be downloaded here: {proc.stderr[-500:]}"
                )
            (house / ".complete").write_text("ok\n")
    return house
