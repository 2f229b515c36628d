"""A real fork: a git repository made here from the pinned sglang release's sources (laid out as
upstream's, under python/), with one commit that adds a launch flag and one that changes a
file. Its parser checks the profile's flags, its commits become a patch series that applies to
the release, and (on the real engine) it builds into a CPU image with a local wheel in place
of the index's twin, whose labels name the commit. Its release on a card is planned on a
described host (`up --dry-run`, the compose document checked by `docker compose config`), and
that release's CPU twin starts here: the fork's parser in that image parses the release's
command line."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import run_cli
from fork_repo import PYPROJECT, commit_all, git, profile_yaml, rebuild_wheel, sha256

from deploytool.errors import ProfileError
from deploytool.host import labels
from deploytool.image import flagcheck, patches
from deploytool.image.build import build, plan_build
from deploytool.profiles import ProfileStore
from deploytool.release.compose import document_text

SGLANG = "0.5.23"
FORK_VERSION = "0.5.23+fork.sm120"
TEST_PROFILES = Path(__file__).parent / "profiles_sglang"
FLAG = "fork-small-batch-kernels"
DEVICE = "sglang/srt/arg_groups/fields/device.py"
COMMON = "sglang/srt/utils/common.py"
ANCHOR = '    sleep_on_idle: A[bool, "Reduce CPU usage when sglang is idle."] = False\n'
FIELD = (
    "    fork_small_batch_kernels: A[\n        bool,\n"
    '        "Use the fork\'s SM120 small-batch kernels.",\n    ] = False\n'
)
MARKER = 'FORK_MARKER = "small-batch kernels"\n'
# The fork's flag, and MTP off: the fork carries none of the release's memory patches, and
# without them the MTP draft leaves an RTX 5090 short of one full-context conversation
# (docs/memory.md); without MTP the release fits the card (the deploy tests plan it there).
ARGS = {
    FLAG: True,
    "speculative-algorithm": None,
    "speculative-num-steps": None,
    "speculative-eagle-topk": None,
    "speculative-num-draft-tokens": None,
}

pytestmark = pytest.mark.index  # the pinned sglang wheel, downloaded once into the shared cache
FINE = ("ok", "redundant", "overridden")  # a flag's statuses that are no failure


def _rewrite(path: Path, text: str) -> None:
    """A new file in place of the old: the tree is hard links into the cached release sources."""
    path.unlink()
    path.write_text(text)


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory, module_home: Path) -> SimpleNamespace:
    release = patches.unpacked_sources(patches.sglang_wheel(SGLANG, "3.11"))
    root = tmp_path_factory.mktemp("fork")
    repo = root / "sglang"
    (repo / "python").mkdir(parents=True)
    patches.link_tree(release / "sglang", repo / "python" / "sglang")
    (repo / "python" / "pyproject.toml").write_text(PYPROJECT.format(version=SGLANG))
    (repo / "README.md").write_text("an sglang fork\n")
    # as sglang's own repository ignores them: bytecode another process left in the cached
    # sources must not reach a commit, or the same fork gets a new head (and a new image) each run
    (repo / ".gitignore").write_text("__pycache__/\n*.py[cod]\n")
    git(repo, "init", "-q")
    base = commit_all(repo, f"sglang {SGLANG}")
    git(repo, "tag", f"v{SGLANG}")

    device = repo / "python" / DEVICE
    assert ANCHOR in device.read_text()
    _rewrite(device, device.read_text().replace(ANCHOR, ANCHOR + FIELD))
    _rewrite(repo / "python" / "pyproject.toml", PYPROJECT.format(version=FORK_VERSION))
    flag = commit_all(repo, f"add --{FLAG}")
    common = repo / "python" / COMMON
    _rewrite(common, common.read_text() + "\n" + MARKER)
    head = commit_all(repo, "a changed file")
    profiles = root / "profiles"
    profiles.mkdir()
    return SimpleNamespace(repo=repo, base=base, flag=flag, head=head, profiles=profiles, root=root)


def _profile(fork: SimpleNamespace, name: str, source: dict, **kwargs):
    (fork.profiles / f"{name}.yaml").write_text(profile_yaml(name, source, **kwargs))
    return ProfileStore([TEST_PROFILES, fork.profiles]).get(name)


def _git_source(fork: SimpleNamespace, commit: str | None = None) -> dict:
    return {"kind": "git", "repo": str(fork.repo), "commit": commit or fork.head}


def test_profiles_check_runs_the_forks_parser_keyed_by_its_commit(
    fork: SimpleNamespace, tmp_path: Path
) -> None:
    # Three profiles in one `profiles check --all`: two of the fork (its flag, and a typo of it)
    # and one of the pinned release with the fork's flag. The fork's two share one start-up of
    # the fork's parser; the release's is read, with the shipped profiles, by the release's own.
    folder = tmp_path / "profiles"
    folder.mkdir()
    for name, source, args in (
        ("fork-flags", _git_source(fork), {FLAG: True}),
        ("fork-typo", _git_source(fork), {FLAG[:-1]: True}),
        ("release-flags", {"kind": "wheel"}, {FLAG: True}),
    ):
        (folder / f"{name}.yaml").write_text(profile_yaml(name, source, args=args))
    out = run_cli(
        "profiles",
        "check",
        "--all",
        "--no-image",
        "--json",
        "--profiles-dir",
        str(TEST_PROFILES),
        "--profiles-dir",
        str(folder),
    )
    assert out.returncode == 1, out.stderr  # fork-typo and release-flags fail
    checks = {p["profile"]: p for p in json.loads(out.stdout)["profiles"]}

    check = checks["fork-flags"]
    assert check["ok"], [(f["flag"], f["message"]) for f in check["findings"] if f["status"] not in FINE]
    assert [f["status"] for f in check["findings"] if f["flag"] == f"--{FLAG}"] == ["ok"]
    assert (
        f"runtime-src/git-{fork.head}/tree/python" in check["where"]
    )  # the fork's sources, unpacked per commit
    assert check["sglang_version"] == FORK_VERSION  # the parser that ran is the fork's, and says so

    [failure] = [f for f in checks["fork-typo"]["findings"] if f["status"] not in FINE]
    assert (failure["flag"], failure["status"]) == (f"--{FLAG[:-1]}", "unknown")
    assert f"--{FLAG}" in failure["suggestions"]
    assert checks["fork-typo"]["where"] == check["where"]

    # the pinned release's own parser has no such flag: the fork's is the one that was read
    plain = checks["release-flags"]
    assert [f["status"] for f in plain["findings"] if f["flag"] == f"--{FLAG}"] == ["unknown"]
    assert "runtime-src" not in plain["where"] and plain["sglang_version"] == SGLANG


def test_patches_import_writes_the_forks_commits_as_a_series_the_release_takes(fork: SimpleNamespace) -> None:
    series = fork.root / "series"
    out = run_cli(
        "patches",
        "import",
        "--from",
        str(fork.repo),
        "--base",
        f"v{SGLANG}",
        "--head",
        fork.head,
        "--out",
        str(series),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout)
    assert (made["base_commit"], made["head_commit"], made["subdir"]) == (fork.base, fork.head, "python")
    assert len(made["names"]) == 2 and (series / "series").is_file()
    assert patches.unidiff.read_series(series / "series") == made["names"]
    first = (series / made["names"][0]).read_text()
    assert f"+++ b/{DEVICE}" in first and "pyproject.toml" not in first  # site-packages paths only
    assert made["left_out"] == ["changes outside python/sglang/ (not in site-packages): pyproject.toml"]
    assert f"+++ b/{COMMON}" in (series / made["names"][1]).read_text()

    # the memory planner reads the series' memory.yaml: one entry per patch, no effect declared
    from deploytool.memory.patch_effects import read_memory_effects

    declared = read_memory_effects(series, made["names"])
    assert [(p.patch, p.effects) for p in declared] == [(name, ()) for name in made["names"]]
    assert fork.head[:12] in declared[1].why

    _profile(fork, "release-series", {"kind": "wheel", "series": str(series)})
    out = run_cli(
        "patches",
        "check",
        "--profile",
        "release-series",
        "--json",
        "--profiles-dir",
        str(TEST_PROFILES),
        "--profiles-dir",
        str(fork.profiles),
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] and [r["name"] for r in report["results"]] == made["names"]
    assert report["wheel"].startswith(f"sglang-{SGLANG}-")
    tree = patches.patched_tree(
        ProfileStore([TEST_PROFILES, fork.profiles]).get("release-series"), fork.root / "patched"
    )
    assert FIELD in (tree / DEVICE).read_text() and MARKER in (tree / COMMON).read_text()

    # profiles check reads the release with this series applied: the fork's flag is known there
    flagged = _profile(
        fork, "release-series-flag", {"kind": "wheel", "series": str(series)}, args={FLAG: True}
    )
    check = flagcheck.check(flagged, use_image=False)
    assert [f.status for f in check.findings if f.flag == f"--{FLAG}"] == ["ok"], check.where
    assert "with the patched sources" in check.where

    again = run_cli(
        "patches",
        "import",
        "--from",
        str(fork.repo),
        "--base",
        f"v{SGLANG}",
        "--head",
        fork.head,
        "--out",
        str(series),
    )
    assert again.returncode == 2 and "is not empty" in again.stderr


@pytest.fixture(scope="module")
def fork_image(fork: SimpleNamespace, sglang_cpu_wheelhouse: Path) -> SimpleNamespace:
    """The fork at its head commit built into a CPU image with a local wheel, once per module
    (and found, not built again, by later runs: the commits and the wheel are the same bytes)."""
    from conftest import engine_problem

    from deploytool.host.engine import Engine

    if engine_problem():
        pytest.skip(engine_problem())
    house = sglang_cpu_wheelhouse  # the CPU test image's wheels (test_recipe_sglang)
    [twin] = house.glob("nvidia_ml_py-*.whl")
    local_version = twin.name.split("-")[1] + "+deploytool.test"
    wheel = rebuild_wheel(twin, fork.root, local_version)
    pinned = [{"file": str(wheel), "sha256": sha256(wheel)}]
    profile = _profile(fork, "fork-cpu-test", _git_source(fork), args=ARGS, wheels=pinned)
    result = build(profile, engine=Engine(), wheelhouse=house)
    return SimpleNamespace(
        result=result, house=house, wheel=wheel, local_version=local_version, pinned=pinned
    )


@pytest.mark.timeout(1800)
def test_a_fork_by_commit_builds_on_the_cpu_path_with_a_local_wheel(
    fork: SimpleNamespace, fork_image: SimpleNamespace, docker_engine, tmp_path: Path
) -> None:
    result, house, local_version = fork_image.result, fork_image.house, fork_image.local_version
    wheel = fork_image.wheel
    image = docker_engine.image(result.image)
    source = json.loads(image.labels[labels.IMAGE_RUNTIME_SOURCE])
    # what the image holds, and no path of this host (the journal says where it was read)
    assert source == {"kind": "git", "commit": fork.head, "version": FORK_VERSION, "subdir": "python"}
    toolchain_label = json.loads(image.labels[labels.IMAGE_FINGERPRINT])
    assert toolchain_label["sglang_source"] == f"git {fork.head} python/ (sglang {FORK_VERSION})"
    assert json.loads(toolchain_label["local_wheels"]) == {"nvidia-ml-py": sha256(wheel)}
    assert json.loads(image.labels[labels.IMAGE_LOCAL_WHEELS]) == [
        {"name": "nvidia-ml-py", "version": local_version, "file": wheel.name, "sha256": sha256(wheel)}
    ]

    # Inside: the fork's package as installed from its own metadata, its changed file, and the
    # local wheel alone where the index's twin would be.
    out = docker_engine.run_throwaway(
        result.image,
        "cat /opt/deploytool/toolchain.json; python -c 'from sglang.srt.utils.common import FORK_MARKER; "
        "print(FORK_MARKER)'",
    )
    installed = json.loads(out[: out.rindex("}") + 1])
    assert installed["sglang"] == FORK_VERSION and installed["nvidia_ml_py"] == local_version
    assert [v for k, v in installed["installed"].items() if k.lower() == "nvidia-ml-py"] == [local_version]
    assert out.strip().endswith("small-batch kernels")

    # profiles check finds this image (the tag of the profile's inputs) and the flag passes there
    check = run_cli(
        "profiles",
        "check",
        "--profile",
        "fork-cpu-test",
        "--wheelhouse",
        str(house),
        "--json",
        "--profiles-dir",
        str(TEST_PROFILES),
        "--profiles-dir",
        str(fork.profiles),
    )
    assert check.returncode == 0, check.stdout + check.stderr
    report = json.loads(check.stdout)
    assert report["where"] == f"image {result.image}" and report["sglang_version"] == FORK_VERSION
    assert [f["status"] for f in report["findings"] if f["flag"] == f"--{FLAG}"] == ["ok"]
    typo = _profile(fork, "fork-typo", _git_source(fork), args={FLAG[:-1]: True})
    assert not flagcheck.check(typo, image=result.image).ok

    # a new commit is a new tag; a dirty checkout and a changed wheel are refused before a build
    # (on a profile of its own and a copy of the wheel: the module's image and profile stay as built)
    copy = tmp_path / wheel.name
    copy.write_bytes(wheel.read_bytes())
    pinned = [{"file": str(copy), "sha256": sha256(copy)}]
    profile = _profile(fork, "fork-cpu-test-changes", _git_source(fork), args=ARGS, wheels=pinned)
    (fork.repo / "python" / "sglang" / "fork_notes.py").write_text("NOTE = 1\n")
    with pytest.raises(ProfileError, match="uncommitted changes"):
        build(profile, engine=_untouchable(), wheelhouse=house)
    newer = commit_all(fork.repo, "one more")
    assert (
        plan_build(
            _profile(fork, "fork-cpu-test-changes", _git_source(fork, newer), args=ARGS, wheels=pinned),
            wheelhouse=house,
        ).tag
        != plan_build(profile, wheelhouse=house).tag
    )
    copy.write_bytes(copy.read_bytes() + b"\0")
    with pytest.raises(ProfileError, match="changed since it was pinned"):
        build(profile, engine=_untouchable(), wheelhouse=house)


def _untouchable():
    class Untouchable:
        def __getattr__(self, name: str):
            raise AssertionError(f"the engine was asked for {name} before the input was refused")

    return Untouchable()


# -- the fork's release on a card: planned on a described host, its CPU twin started here -------
HOSTS = Path(__file__).parent / "data" / "nvml-hosts"
CARD = "GPU-5090a001-6c1e-4f0b-9a7d-3e2f1b0c9d8e"  # the first RTX 5090 of rtx5090x2.yaml
SLOT = "gpu-5090a001"
MODEL, MODEL_FILES = (
    "nvidia/Qwen3.6-35B-A3B-NVFP4",
    Path(__file__).parent / "data" / "models" / "qwen3.6-35b-a3b-nvfp4",
)


@pytest.fixture
def on_the_card(tmp_path: Path, fork: SimpleNamespace) -> SimpleNamespace:
    """The environment of a host with two RTX 5090s (described: no NVIDIA runtime here) whose hub
    cache holds the profile's checkpoint: its config and index, an empty file for each shard."""
    import hashlib

    commit = hashlib.sha1(MODEL.encode()).hexdigest()
    root = tmp_path / "hf" / "hub" / ("models--" + MODEL.replace("/", "--"))
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for source in MODEL_FILES.iterdir():
        (snapshot / source.name).write_bytes(source.read_bytes())
    for shard in set(
        json.loads((snapshot / "model.safetensors.index.json").read_text())["weight_map"].values()
    ):
        (snapshot / shard).write_bytes(b"")
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    env = {
        "DEPLOYTOOL_NVML_STANDIN": str(HOSTS / "rtx5090x2.yaml"),
        "DEPLOYTOOL_HF_HOME": str(tmp_path / "hf"),
        "DEPLOYTOOL_PROFILES_PATH": os.pathsep.join([str(TEST_PROFILES), str(fork.profiles)]),
    }
    return SimpleNamespace(env=env, commit=commit)


def _nothing_of_the_slot(engine, home: Path) -> None:
    """No release, no twin left on the engine, and nothing written to the state directory."""
    assert engine.releases(SLOT) == []
    left = engine.client.containers.list(all=True, filters={"label": f"{labels.CPU_TWIN}"})
    assert [c.name for c in left if c.labels.get(labels.INSTANCE) == labels.instance()] == []
    assert not (home / "slots").exists() and not (home / "journal.jsonl").exists()


@pytest.mark.timeout(1800)
def test_up_dry_run_plans_the_forks_release_on_a_described_card(
    fork: SimpleNamespace,
    fork_image: SimpleNamespace,
    docker_engine,
    on_the_card: SimpleNamespace,
    deploytool_home: Path,
) -> None:
    from conftest import free_port

    port = str(free_port())
    up = ["up", "--gpu", CARD, "--profile", "fork-cpu-test", "--port", port, "--dry-run"]
    out = run_cli(*up, "--wheelhouse", str(fork_image.house), "--json", env=on_the_card.env)
    assert out.returncode == 0, out.stdout + out.stderr
    plan = json.loads(out.stdout)["plan"]
    # the image `build --wheelhouse` made, found on the engine: nothing to build
    assert plan["image"] == fork_image.result.image
    assert (plan["steps"][0]["step"], plan["steps"][0]["needed"]) == ("Build", False)
    server = plan["compose"]["services"]["server"]
    assert server["image"] == fork_image.result.image and server["labels"]["dev.deploytool.gpus"] == CARD
    assert server["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "device_ids": [CARD], "capabilities": ["gpu"]}
    ]
    command = server["command"]
    assert command[:3] == ["python3", "-m", "sglang.launch_server"] and f"--{FLAG}" in command
    assert command[command.index("--revision") + 1] == on_the_card.commit
    assert "--speculative-algorithm" not in command
    # the render notes name the fork's commit; the memory plan fits the card without MTP
    assert any(f"at commit {fork.head}" in line for line in plan["inputs"])
    assert (
        f"runtime identity (in the image tag and the toolchain label): git {fork.head} python/ "
        f"(sglang {FORK_VERSION})" in plan["inputs"]
    )
    assert plan["memory"]["verdict"] == "fits" and "NVIDIA GeForce RTX 5090" in plan["checks"][0]
    # the plan had `docker compose config` check the document, and compose keeps the reservation
    assert (
        f"compose document: `docker compose config` accepts it (with its reservation of {CARD})"
        in plan["checks"]
    )
    assert not any("docker compose config" in w or "no Docker engine" in w for w in plan["warnings"])
    assert any(
        "builds a CPU image (image.cuda: null)" in w and "a real `up` refuses it" in w
        for w in plan["warnings"]
    )
    text = document_text(plan["compose"], profile=plan["profile"], slot=plan["slot"], release=plan["release"])
    config = docker_engine.compose_config(text, project=plan["compose"]["name"])
    assert yaml.safe_load(config)["services"]["server"]["deploy"]["resources"]["reservations"]["devices"][0][
        "device_ids"
    ] == [CARD]

    # Without the wheelhouse, the tag is another one: its wheels are inputs of the tag
    bare = json.loads(run_cli(*up, "--json", env=on_the_card.env).stdout)["plan"]
    assert bare["image"] != fork_image.result.image
    assert (bare["steps"][0]["needed"], bare["steps"][0]["reason"]) == (
        True,
        "no image with these inputs yet",
    )

    # what a person reads
    text_out = run_cli(*up, "--wheelhouse", str(fork_image.house), env=on_the_card.env)
    assert text_out.returncode == 0, text_out.stderr
    assert (
        f"  1. use {fork_image.result.image} (an image with the same inputs is on the engine)"
        in text_out.stdout
    )
    assert f"at commit {fork.head}" in text_out.stdout

    # `render --wheelhouse` writes the same release's document with no engine asked: the same
    # image, the fork's flag, and the commit in the notes above it
    rendered = run_cli(
        "render",
        "--gpu",
        CARD,
        "--profile",
        "fork-cpu-test",
        "--port",
        port,
        "--wheelhouse",
        str(fork_image.house),
        env=on_the_card.env,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert f"at commit {fork.head}" in rendered.stdout.split("services:")[0]
    document = yaml.safe_load(rendered.stdout)["services"]["server"]
    assert document["image"] == fork_image.result.image and f"--{FLAG}" in document["command"]

    # A real `up` on this host's own NVML (none: no card to check) refuses the CPU image before
    # anything changes; on the described host it is refused sooner, as every real up there.
    real = run_cli(
        "up",
        "--gpu",
        CARD,
        "--profile",
        "fork-cpu-test",
        "--port",
        port,
        "--wheelhouse",
        str(fork_image.house),
        "--json",
        env={**on_the_card.env, "DEPLOYTOOL_NVML_STANDIN": ""},
    )
    assert real.returncode == 2, real.stdout + real.stderr
    assert "builds a CPU image (image.cuda: null)" in json.loads(real.stdout)["error"]["message"]
    assert docker_engine.releases(SLOT) == []


@pytest.mark.timeout(1800)
def test_the_cpu_twin_runs_the_release_command_through_the_forks_parser(
    fork: SimpleNamespace,
    fork_image: SimpleNamespace,
    docker_engine,
    on_the_card: SimpleNamespace,
    deploytool_home: Path,
) -> None:
    from conftest import hold_port

    twin = ["cpu-twin", "--gpu", CARD, "--profile", "fork-cpu-test", "--wheelhouse", str(fork_image.house)]
    # the twin publishes no port: the profile's own held by another process does not stop it
    with hold_port(ProfileStore([TEST_PROFILES, fork.profiles]).get("fork-cpu-test").server.port):
        out = run_cli(*twin, "--json", env=on_the_card.env)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert result["ok"] and result["exit_code"] == 0
    assert result["image"] == fork_image.result.image and result["slot"] == SLOT and result["release"] == 1
    assert f"no GPU reservation (the release reserves {CARD})" in result["changes"]
    report = result["report"]
    # the fork's sglang, installed in the image, parsed the release's own command line
    assert report["sglang"] == FORK_VERSION and report["sglang_module"].startswith("/opt/venv/")
    assert result["command"][:3] == ["python3", "-m", "sglang.launch_server"]
    given = [a for a in result["command"] if a.startswith("--")]
    assert list(report["server_args"]) == given
    assert report["server_args"][f"--{FLAG}"] is True
    assert report["server_args"]["--revision"] == on_the_card.commit
    assert report["server_args"]["--kv-cache-dtype"] == "fp8_e4m3"
    # the weights' config is where the release's runtime looks, through its read-only hub mount
    model = report["model"]
    assert model["found"] and model["config"] == (
        f"/root/.cache/huggingface/hub/models--nvidia--Qwen3.6-35B-A3B-NVFP4/"
        f"snapshots/{on_the_card.commit}/config.json"
    )
    assert model["architectures"] == json.loads((MODEL_FILES / "config.json").read_text())["architectures"]
    # a CPU image carries sglang's parser only: its own start stops at the first serving package
    assert report["resolution"]["ok"] is False
    assert report["resolution"]["stopped_at"].startswith("ModuleNotFoundError: No module named")
    _nothing_of_the_slot(docker_engine, deploytool_home)

    # without --wheelhouse the release names the index-built image, which is not here: refused
    # before anything starts, with the build that makes it
    bare = run_cli(*twin[:-2], "--json", env=on_the_card.env)
    assert bare.returncode == 2, bare.stdout + bare.stderr
    error = json.loads(bare.stdout)["error"]
    assert "is not on this engine" in error["message"] and fork_image.result.image not in error["message"]
    assert "deploytool build --profile fork-cpu-test" in error["hint"]
    _nothing_of_the_slot(docker_engine, deploytool_home)

    # the parse is real: a misspelt flag in the release's command stops the twin as it would stop
    # the release, with sglang's own message (the image is the fork's, given by --image)
    _profile(
        fork,
        "fork-twin-typo",
        _git_source(fork),
        args={**ARGS, FLAG: None, "fork-smal-batch-kernels": True},
        wheels=fork_image.pinned,
    )
    typo = run_cli(
        "cpu-twin",
        "--gpu",
        CARD,
        "--profile",
        "fork-twin-typo",
        "--image",
        fork_image.result.image,
        env=on_the_card.env,
    )
    assert typo.returncode == 1, typo.stdout + typo.stderr
    assert "refused by the image's sglang: exit 2" in typo.stdout
    assert "unrecognized arguments: --fork-smal-batch-kernels" in typo.stdout
    _nothing_of_the_slot(docker_engine, deploytool_home)
