"""The planner plans a launch by the rules of the SGLang release it will run (memory/releases.py):
the hybrid's state strategy `auto` resolves by that release's extra-buffer list, and a runtime
the planner holds no rules for is planned by the nearest release before it, with a warning."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from deploytool.memory.profile_plan import plan_memory_command
from deploytool.memory.releases import MODELLED_RELEASES, PLANNER_RELEASE, rules_release
from deploytool.memory.request import PlanMemoryRequest

REAL = Path(__file__).parent / "data" / "sglang-real"
PROFILES = Path(__file__).parents[1] / "scripts" / "gpu-check" / "profiles"
HYBRID = "gpu-check-qwen36-tiny-mtp"  # Qwen3_5MoeForCausalLM, the text-only hybrid


def _profiles_on(tmp_path: Path, runtime: str) -> Path:
    """The harness profiles, the base pinned to `runtime` and the hybrid left to `auto`."""
    folder = tmp_path / f"profiles-{runtime}"
    shutil.copytree(PROFILES, folder)
    base = folder / "gpu-check-base.yaml"
    data = yaml.safe_load(base.read_text())
    data["image"]["runtime_version"] = runtime
    base.write_text(yaml.safe_dump(data))
    return folder


def _plan(folder: Path, *sets: str, patches: str | None = None):
    return plan_memory_command(
        PlanMemoryRequest.from_options(
            HYBRID,
            card="h200",
            checkpoint=REAL / "models" / "qwen36-tiny",
            profiles_dirs=[folder],
            sets=list(sets),
            patches=patches,
        )
    )


def test_auto_resolves_by_the_runtime_releases_list(tmp_path: Path) -> None:
    on_17, on_23 = _profiles_on(tmp_path, "0.5.17"), _profiles_on(tmp_path, "0.5.23")
    auto_17 = _plan(on_17, "mamba-radix-cache-strategy=auto")
    auto_23 = _plan(on_23, "mamba-radix-cache-strategy=auto")
    # 0.5.17 lacks Qwen3_5MoeForCausalLM in its list: no_buffer, 3 slots a running request
    assert auto_17.state_slots_per_request == 3
    assert auto_17.pool_tokens == _plan(on_17, "mamba-radix-cache-strategy=no_buffer").pool_tokens
    # 0.5.23 has it: extra_buffer with the overlap scheduler, 3 + 2
    assert auto_23.state_slots_per_request == 5
    assert auto_23.pool_tokens == _plan(on_23, "mamba-radix-cache-strategy=extra_buffer").pool_tokens
    assert auto_23.pool_tokens < auto_17.pool_tokens  # the extra slots come out of the pool
    assert (auto_17.sglang_version, auto_23.sglang_version) == ("0.5.17", "0.5.23")
    assert not [w for w in auto_17.warnings + auto_23.warnings if "planner holds the rules" in w]


def test_extra_buffer_needs_the_triton_linear_attention_backend(tmp_path: Path) -> None:
    on_23 = _profiles_on(tmp_path, "0.5.23")
    plan = _plan(on_23, "mamba-radix-cache-strategy=auto", "linear-attn-backend=flashinfer")
    assert plan.state_slots_per_request == 3


def test_a_runtime_without_its_own_rules_is_planned_by_the_one_before_and_says_so(tmp_path: Path) -> None:
    # --patches none: the project ships no patch series for a release it has no rules for either
    plan = _plan(_profiles_on(tmp_path, "0.5.20"), "mamba-radix-cache-strategy=auto", patches="none")
    assert plan.sglang_version == "0.5.17" and plan.state_slots_per_request == 3
    warning = next(w for w in plan.warnings if "planner holds the rules" in w)
    assert "SGLang 0.5.20" in warning and "0.5.17's" in warning


@pytest.mark.parametrize(
    ("runtime", "release", "warned"),
    [
        (None, PLANNER_RELEASE, False),
        ("0.5.17", "0.5.17", False),
        ("0.5.23", "0.5.23", False),
        ("0.5.17.post1", "0.5.17", False),  # a post release of a modelled one
        ("0.5.23+fork.3", "0.5.23", False),  # a local build of one
        ("0.5.20", "0.5.17", True),
        ("0.5.30", "0.5.23", True),
        ("0.4.9", "0.5.17", True),  # older than any: the oldest rules, warned
        ("main", PLANNER_RELEASE, True),
    ],
)
def test_which_release_plans_a_runtime(runtime, release, warned) -> None:
    chosen, warning = rules_release(runtime)
    assert chosen == release and chosen in MODELLED_RELEASES
    assert (warning is not None) == warned
