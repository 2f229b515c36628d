"""The refusals of a k8s request, a build's wheelhouse and `patches import` name the request's
field (what a library caller passed), and the CLI prints the flag that set it: the same words a
person read before the library stopped naming flags."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run_cli

from deploytool.cli.flags import flag_message
from deploytool.errors import FieldError
from deploytool.image.build import plan_build
from deploytool.image.series_import import import_series
from deploytool.k8s import K8sRequest
from deploytool.k8s import release as rel
from deploytool.profiles import ProfileStore

PROFILE = "h200-qwen3.6-35b-a3b-fp8"
IMAGE = "registry.example/deploytool/sglang@sha256:" + "a" * 64


def _refusal(call: Callable[[], object]) -> FieldError:
    with pytest.raises(FieldError) as caught:
        call()
    return caught.value


def test_a_k8s_request_names_the_field_and_the_cli_the_flag() -> None:
    profile = ProfileStore().get(PROFILE)

    def request(**kw: object) -> Callable[[], object]:
        return lambda: K8sRequest(**{"profile": profile, "image": IMAGE, "toolchain": {}, **kw})

    cases = [
        (
            request(image="registry.example/sglang:latest"),
            "image",
            "--image 'registry.example/sglang:latest' is not pinned by digest (expected NAME@sha256:<64 hex>)",
        ),
        (
            request(qualify_image="registry.example/q:1"),
            "qualify_image",
            "--qualify-image 'registry.example/q:1' is not pinned by digest",
        ),
        (request(replicas=0), "replicas", "--replicas 0: at least one serving copy is needed"),
        (
            request(retention=0),
            "retention",
            "--retention 0: keep at least one previous release to roll back to",
        ),
        (
            request(namespace="Bad_NS"),
            "namespace",
            "--namespace 'Bad_NS' is not a Kubernetes namespace name (lowercase letters, digits and '-', at most 63)",
        ),
        (
            lambda: rel.parse_node_selectors(["pool"]),
            "node_selector",
            "--node-selector 'pool': expected KEY=VALUE, e.g. nvidia.com/gpu.count=8",
        ),
        (
            lambda: rel.parse_tolerations(["dedicated=llm:Sometimes"]),
            "tolerations",
            "--toleration 'dedicated=llm:Sometimes': expected KEY[=VALUE]:EFFECT with EFFECT one of "
            "NoSchedule, PreferNoSchedule, NoExecute",
        ),
    ]
    for call, field, printed in cases:
        error = _refusal(call)
        assert (error.field, flag_message(error)) == (field, printed)
        # a library caller reads the field's own name where the CLI says the flag
        assert str(error).startswith(field + " ") and "--" not in str(error).split(" ", 1)[0]


def test_the_cli_prints_the_flag_in_words_and_in_json(tmp_path: Path) -> None:
    done = run_cli("render", "--k8s", "--profile", PROFILE, "--image", "registry.example/sglang:latest")
    assert done.returncode == 2, done.stderr
    assert "error: --image 'registry.example/sglang:latest' is not pinned by digest" in done.stderr
    args = ("--from", str(tmp_path), "--base", "v0.0.1", "--head", "main", "--out", str(tmp_path / "s"))
    for json_output in ([], ["--json"]):
        done = run_cli("patches", "import", *args, *json_output)
        assert done.returncode == 2 and f"error: --from {tmp_path}: not a git repository" in done.stderr
    error = json.loads(done.stdout)["error"]
    assert (error["message"], error["kind"]) == (f"--from {tmp_path}: not a git repository", "UsageError")


def test_a_wheelhouse_that_is_no_folder_or_lacks_sglang_names_the_wheelhouse(tmp_path: Path) -> None:
    profile = ProfileStore([Path(__file__).resolve().parent / "profiles_sglang"]).get("sglang-cpu-test")
    missing = tmp_path / "nowhere"
    error = _refusal(lambda: plan_build(profile, wheelhouse=missing))
    assert (error.field, flag_message(error)) == ("wheelhouse", f"--wheelhouse {missing} is not a folder")
    missing.mkdir()
    error = _refusal(lambda: plan_build(profile, wheelhouse=missing))
    assert error.field == "wheelhouse"
    assert flag_message(error).startswith(
        f"--wheelhouse {missing} has no sglang {profile.image.runtime_version} wheel (found none)"
    )


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    """A repository whose v0.0.1 holds no sglang package, then a side branch off its root."""
    repo = tmp_path / "fork"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    (repo / "README").write_text("root\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "root")
    (repo / "README").write_text("release\n")
    _git(repo, "commit", "-qam", "release")
    _git(repo, "tag", "v0.0.1")
    _git(repo, "checkout", "-q", "-b", "side", "HEAD~1")
    (repo / "SIDE").write_text("side\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "side")
    return repo


def test_patches_import_names_from_base_and_out(fork: Path, tmp_path: Path) -> None:
    out = tmp_path / "series"
    error = _refusal(lambda: import_series(str(tmp_path), "v0.0.1", "main", out))
    assert (error.field, flag_message(error)) == ("repo", f"--from {tmp_path}: not a git repository")

    error = _refusal(lambda: import_series("https://user:token@git.example/fork.git", "v0.0.1", "main", out))
    assert error.field == "repo" and flag_message(error).startswith(
        "--from: the repository URL carries credentials"
    )

    base, side = _git(fork, "rev-parse", "v0.0.1"), _git(fork, "rev-parse", "side")
    error = _refusal(lambda: import_series(str(fork), "v0.0.1", "side", out))
    assert (error.field, flag_message(error)) == (
        "base",
        f"--base v0.0.1 ({base[:12]}) is not an ancestor of --head side ({side[:12]})",
    )

    error = _refusal(lambda: import_series(str(fork), "v0.0.1", "main", out))
    assert (error.field, flag_message(error)) == (
        "base",
        f"--base v0.0.1 of {fork}: no sglang package: python/pyproject.toml or pyproject.toml is "
        "missing or names another project",
    )

    # a fork whose release is sglang's: only the folder the series would go to is in the way
    (fork / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.0.1"\n')
    _git(fork, "checkout", "-q", "main")
    _git(fork, "add", ".")
    _git(fork, "commit", "-qm", "sglang")
    _git(fork, "tag", "-f", "v0.0.1")
    out.mkdir()
    (out / "kept").write_text("x")
    error = _refusal(lambda: import_series(str(fork), "v0.0.1", "main", out))
    assert (error.field, flag_message(error)) == ("out", f"--out {out} is not empty")
