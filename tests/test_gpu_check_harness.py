"""The GPU harness (scripts/gpu-check/) where it runs without a GPU: the patched plan, on a small
overlay here (its patches go to a fresh copy of the overlay, never the overlay the other plans and
the next call run on, and its recorded plan names the same patches), and the raw NVML dump's
answers as JSON data."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[1] / "scripts" / "gpu-check"
sys.path.insert(0, str(HARNESS))

import drive  # noqa: E402
import nvml_dump  # noqa: E402
from overlay_patches import apply_to_copy, patch_names  # noqa: E402

from deploytool.memory.profile_plan import plan_memory_command  # noqa: E402
from deploytool.memory.request import PlanMemoryRequest  # noqa: E402

REAL = Path(__file__).parent / "data" / "sglang-real"
MEASURED = Path(__file__).parents[1] / "docs" / "measured"

STOCK = "def pool():\n    return 1\n"


@pytest.fixture
def overlay(tmp_path: Path) -> tuple[Path, Path]:
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "pool.py").write_text(STOCK)
    series = tmp_path / "patches"
    series.mkdir()
    changed = tmp_path / "changed" / "sglang"
    changed.mkdir(parents=True)
    (changed / "pool.py").write_text(STOCK.replace("1", "2"))
    diff = subprocess.run(
        [
            "diff",
            "-u",
            "--label",
            "a/sglang/pool.py",
            "--label",
            "b/sglang/pool.py",
            str(site / "sglang" / "pool.py"),
            str(changed / "pool.py"),
        ],
        capture_output=True,
        text=True,
    )
    (series / "0001-bigger-pool.patch").write_text(diff.stdout)
    (series / "0009-unlisted.patch").write_text("not in the series\n")
    (series / "series").write_text("# the order\n0001-bigger-pool.patch\n")
    return site, series


def test_the_patched_plan_patches_a_copy_and_a_second_run_starts_stock(overlay, tmp_path: Path) -> None:
    site, series = overlay
    names = patch_names(series)
    assert names == ["0001-bigger-pool.patch"]  # the series' order, not every file in the folder
    for _ in range(2):  # a warm machine's second call
        result = apply_to_copy(site, series, names, tmp_path / "site-patched")
        assert result["applied"], result
        assert (Path(result["site"]) / "sglang" / "pool.py").read_text() == STOCK.replace("1", "2")
        assert (site / "sglang" / "pool.py").read_text() == STOCK
    assert apply_to_copy(site, series, ["0002-gone.patch"], tmp_path / "x")["why"].startswith(
        "0002-gone.patch not in"
    )


def test_the_patched_plans_memory_plan_names_its_patches(tmp_path: Path) -> None:
    spec = drive.PLANS["a3b-patched"]
    args = drive.plan_memory_args(spec, tmp_path, "GPU-1", ["0002-a.patch", "0003-b.patch"], [])
    assert args[args.index("--patches") + 1] == "0002-a.patch,0003-b.patch"
    assert "--patches" not in drive.plan_memory_args(drive.PLANS["a3b"], tmp_path, None, None, [])


def test_every_plan_starts_a_profile_that_fits_and_runs_steps_drive_knows(tmp_path: Path) -> None:
    for name, spec in drive.PLANS.items():
        plan = plan_memory_command(
            PlanMemoryRequest.from_options(
                spec["profile"],
                card="h200",
                checkpoint=REAL / "models" / spec["model"],
                profiles_dirs=[drive.PROFILES],
            )
        )
        assert plan.fits, (name, plan.problems)
        unknown = [s for s in spec["steps"] if s.startswith("agree") and s not in drive.AGREE_WORKLOADS]
        assert not unknown, (name, unknown)


def test_the_tuned_plan_is_the_launch_tune_measured() -> None:
    """The a3b-tuned plan's profile is tune's winner: its flags are the winner's changes and derived
    flags, and its plan meets the pool and running limit that winner's server reported."""
    result = json.loads((MEASURED / "tune-h200-a3b.json").read_text())
    winner = next(c for c in result["candidates"] if c["id"] == result["winner"])
    spec = drive.PLANS["a3b-tuned"]
    from deploytool.profiles import ProfileStore

    args = ProfileStore([drive.PROFILES]).get(spec["profile"]).server.args
    assert {k: args[k] for k in {**winner["changes"], **winner["derived"]}} == {
        **winner["changes"],
        **winner["derived"],
    }
    plan = plan_memory_command(
        PlanMemoryRequest.from_options(
            spec["profile"],
            card="h200",
            checkpoint=REAL / "models" / spec["model"],
            profiles_dirs=[drive.PROFILES],
        )
    )
    assert plan.max_running_requests == winner["reported"]["running_limit"]
    assert abs(plan.pool_tokens / winner["reported"]["kv_tokens"] - 1) < 0.002


def test_the_nvml_dump_writes_ctypes_arrays_and_structs_as_data(monkeypatch) -> None:
    """nvmlDeviceGetCpuAffinity answers a c_ulong array; structs hold char and number arrays."""

    class Fabric(ctypes.Structure):
        _fields_ = [
            ("clusterUuid", ctypes.c_char * 8),
            ("partitionId", ctypes.c_uint),
            ("ids", ctypes.c_uint * 2),
        ]

    mask = (ctypes.c_ulong * 4)(0xFFFF, 0, 0, 0)
    fabric = Fabric(b"cluster", 3, (ctypes.c_uint * 2)(7, 8))
    monkeypatch.setattr(nvml_dump.n, "nvmlDeviceGetCpuAffinity", lambda handle, size: mask, raising=False)
    monkeypatch.setattr(nvml_dump.n, "nvmlDeviceGetGpuFabricInfo", lambda handle: fabric, raising=False)
    answers = [
        nvml_dump.call("nvmlDeviceGetCpuAffinity", None, 4),
        nvml_dump.call("nvmlDeviceGetGpuFabricInfo", None),
    ]
    assert json.loads(json.dumps(answers, default=str)) == [
        {"value": [0xFFFF, 0, 0, 0]},
        {"value": {"clusterUuid": "cluster", "partitionId": 3, "ids": [7, 8]}},
    ]
