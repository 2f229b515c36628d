"""Where a release's weights come from, whether they are there, and which weights they are.

A profile names its model one way:

    model:
      hub: nvidia/Qwen3.6-35B-A3B-NVFP4     # a hub repository, served from the host's hub cache
      revision: main                        # optional: a branch, tag or commit (default main)
    # or
    model:
      host_path: /srv/models/Qwen3.6-35B-A3B-NVFP4   # a local folder, mounted read-only

`plan_model` (pure) says what the container gets: mounts, environment, `--model-path`.
`check_model` looks on the host (before anything is stopped) and returns the same plan with
what it serves: the hub commit from the cache's refs/, or a fingerprint of the folder.

The hub cache layout is huggingface_hub's: <cache>/models--ORG--NAME/refs/<revision> holds a
commit hash, <cache>/models--ORG--NAME/snapshots/<commit>/ the files (links into blobs/).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..errors import UsageError
from ..profiles.rules import host_folder_problem

if TYPE_CHECKING:
    from ..profiles import Profile

# Where the host's hub cache appears in the container (HF_HUB_CACHE points there).
CONTAINER_HUB_CACHE = "/root/.cache/huggingface/hub"
# deploytool's own setting for the host's hub cache home; else huggingface_hub's HF_HUB_CACHE,
# HF_HOME, ~/.cache/huggingface.
HF_HOME_SETTING = "DEPLOYTOOL_HF_HOME"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
INDEX = "model.safetensors.index.json"
SHARD = re.compile(r"-\d{5}-of-\d{5}\.safetensors$")


class ModelMissing(UsageError):
    """The weights a profile names are not on this host: nothing was stopped."""


@dataclass(frozen=True)
class ModelPlan:
    kind: Literal["folder", "hub", "none"]
    container_path: str | None = None  # what --model-path gets
    host_path: str | None = None  # folder: the checkpoint; hub: the host's hub cache
    repo: str | None = None
    revision: str | None = None  # as the profile asks (hub)
    offline: bool = True
    # Filled by check_model:
    commit: str | None = None  # hub: resolved from refs/
    fingerprint: str | None = None  # folder: see folder_fingerprint
    checked: bool = False

    def launch_args(self) -> dict[str, Any]:
        """SGLang flags from the model source (merged before server.args)."""
        if self.kind == "none":
            return {}
        args: dict[str, Any] = {"model-path": self.repo if self.kind == "hub" else self.container_path}
        pin = self.commit or self.revision
        if self.kind == "hub" and pin:
            args["revision"] = pin  # the exact commit recorded, once resolved
        return args

    def volumes(self) -> list[dict[str, Any]]:
        if self.kind == "folder":
            return [
                {"type": "bind", "source": self.host_path, "target": self.container_path, "read_only": True}
            ]
        if self.kind == "hub":
            # Read-only when offline: a server that cannot download must not write the cache either.
            return [
                {
                    "type": "bind",
                    "source": self.host_path,
                    "target": CONTAINER_HUB_CACHE,
                    "read_only": self.offline,
                }
            ]
        return []

    def environment(self) -> dict[str, str]:
        if self.kind != "hub":
            return {}
        env = {"HF_HUB_CACHE": CONTAINER_HUB_CACHE}
        if self.offline:
            env["HF_HUB_OFFLINE"] = "1"
        return env

    def checkpoint_folder(self) -> Path | None:
        """The host folder holding config.json and the weights (for readers of config.json, such
        as a memory planner): the folder itself, or the checked hub snapshot; None when unknown."""
        if self.kind == "folder":
            return Path(str(self.host_path))
        if self.kind == "hub" and self.commit:
            return hub_repo_folder(Path(str(self.host_path)), str(self.repo)) / "snapshots" / self.commit
        return None

    def identity(self) -> str:
        """One line that says which weights: the label value and the status column."""
        if self.kind == "hub":
            return f"hub:{self.repo}@{self.commit or self.revision or 'main'}"
        if self.kind == "folder":
            return f"folder:{self.host_path}#{(self.fingerprint or 'unchecked').removeprefix('sha256:')[:16]}"
        return "none"

    def record(self) -> dict[str, Any]:
        """What the release record, the qualify report and the contract suite keep."""
        data: dict[str, Any] = {"kind": self.kind, "identity": self.identity()}
        if self.kind == "hub":
            data.update(
                repo=self.repo,
                revision=self.revision or "main",
                commit=self.commit,
                hub_cache=self.host_path,
                offline=self.offline,
            )
        elif self.kind == "folder":
            data.update(
                host_path=self.host_path, container_path=self.container_path, fingerprint=self.fingerprint
            )
        return data


# -- plan (pure) ---------------------------------------------------------------------------------
def host_hub_cache(env: dict[str, str] | None = None) -> Path:
    """The host's hub cache: DEPLOYTOOL_HF_HOME/hub, else huggingface_hub's own rules
    (HF_HUB_CACHE, HF_HOME/hub, ~/.cache/huggingface/hub)."""
    source: Mapping[str, str] = os.environ if env is None else env
    if source.get(HF_HOME_SETTING):
        return Path(source[HF_HOME_SETTING]).expanduser() / "hub"
    if source.get("HF_HUB_CACHE"):
        return Path(source["HF_HUB_CACHE"]).expanduser()
    if source.get("HF_HOME"):
        return Path(source["HF_HOME"]).expanduser() / "hub"
    return Path(source.get("HOME", str(Path.home()))) / ".cache" / "huggingface" / "hub"


def plan_model(profile: Profile, env: dict[str, str] | None = None) -> ModelPlan:
    model = profile.model
    if model.hub:
        cache = host_hub_cache(env)
        home = Path((os.environ if env is None else env).get("HOME", str(Path.home())))
        # the profile loader holds model.host_path to this rule; the cache is mounted the same way.
        # Its default place, under the operator's home (/root/.cache for root), is the cache alone.
        why = None if cache.is_relative_to(home / ".cache") else host_folder_problem(str(cache))
        if why:
            raise UsageError(
                f"profile {profile.name}: model.hub: the hub cache {cache} is mounted into the "
                f"container, and {why}",
                hint=f"set {HF_HOME_SETTING} (or HF_HUB_CACHE) to a folder that holds only the hub cache",
            )
        return ModelPlan(
            kind="hub", repo=model.hub, revision=model.revision, offline=model.offline, host_path=str(cache)
        )
    if model.host_path:
        return ModelPlan(
            kind="folder",
            host_path=str(Path(model.host_path).expanduser()),
            container_path=model.mount_point(),
        )
    return ModelPlan(kind="none")


# -- check (reads the host) ----------------------------------------------------------------------
def check_model(plan: ModelPlan) -> ModelPlan:
    """The plan with what it serves; raises ModelMissing (naming the path and what to do) when
    the weights are not there. `up` calls it before anything is stopped."""
    if plan.kind == "folder":
        return replace(plan, fingerprint=folder_fingerprint(Path(str(plan.host_path))), checked=True)
    if plan.kind == "hub":
        return replace(
            plan,
            commit=hub_commit(
                Path(str(plan.host_path)), str(plan.repo), plan.revision, required=plan.offline
            ),
            checked=True,
        )
    return plan


def unreadable_by_the_server(plan: ModelPlan, capabilities: frozenset[str] = frozenset()) -> list[str]:
    """Warnings for the checked weights the server could not read. It runs as root with every
    capability dropped (docs/security.md), so the file modes decide: root's own files by their
    owner bits, group 0's by the group bits, the rest by what others may do, as a checkpoint
    written under umask 077 (0600 files, 0700 folders) shows. A warning, not a refusal: on a
    rootless engine the container's root is the host's user, who reads them."""
    if capabilities & {"DAC_OVERRIDE", "DAC_READ_SEARCH"}:
        return []
    if plan.kind == "folder":
        top = Path(str(plan.host_path))
        # every file the server may open (the tokenizer's too), from one listing of the folder:
        # check_model already listed and judged the weights, and a checkpoint is read once
        wanted = sorted(path for path in top.iterdir() if not path.is_dir())
    elif plan.kind == "hub" and plan.commit and plan.offline:
        top = Path(str(plan.host_path))
        wanted = sorted((hub_repo_folder(top, str(plan.repo)) / "snapshots" / plan.commit).iterdir())
    else:
        return []
    top = top.resolve()
    refused: dict[Path, str] = {}
    for path in wanted:
        real = path.resolve()
        steps = [real.parent, *real.parent.parents] if real.is_relative_to(top) else [real.parent]
        for folder in steps:
            if not _root_may(folder, 0o1):
                refused.setdefault(folder, "folder")
            if folder == top:
                break
        if not _root_may(real, 0o4):
            refused.setdefault(real, "file")
    if not refused:
        return []
    first, kind = next(iter(refused.items()))
    st = first.stat()
    return [
        f"{len(refused)} of the weights' files and folders under {top} are closed to the server (first: {kind} "
        f"{first}, mode {st.st_mode & 0o777:04o}, owner uid {st.st_uid}): it runs as root with every capability "
        f"dropped and reads only what others may read; run `chmod -R o+rX {top}` (weights hold no secret)"
    ]


def _root_may(path: Path, bit: int) -> bool:
    """Whether root without DAC capabilities may read (4) or enter (1) `path`, by its mode."""
    try:
        st = path.stat()
    except OSError:
        return True  # gone or unreadable to us: the checks above say so in their own words
    shift = 6 if st.st_uid == 0 else 3 if st.st_gid == 0 else 0
    return bool(st.st_mode & (bit << shift))


def weight_files(folder: Path) -> tuple[list[Path], Path | None]:
    """(the safetensors files a checkpoint folder serves, its index when sharded); raises ModelMissing."""
    if not folder.is_dir():
        raise ModelMissing(
            f"model folder {folder} does not exist (model.host_path)",
            hint="copy the checkpoint there (config.json and *.safetensors), or fix model.host_path "
            "in the profile; nothing was stopped",
        )
    if not (folder / "config.json").is_file():
        raise ModelMissing(
            f"model folder {folder} has no config.json: it is not a checkpoint folder",
            hint="point model.host_path at the folder that holds config.json and the *.safetensors "
            "files; nothing was stopped",
        )
    index = folder / INDEX
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            raise ModelMissing(
                f"{index} is not a safetensors index ({type(exc).__name__}: {exc})",
                hint="restore the file from the checkpoint's source; nothing was stopped",
            ) from None
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise ModelMissing(
                f"model folder {folder} lacks {len(missing)} of the {len(names)} shards its index "
                f"names (first: {missing[0]})",
                hint="finish copying the checkpoint; nothing was stopped",
            )
        return [folder / n for n in names], index
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelMissing(
            f"model folder {folder} holds no *.safetensors weights",
            hint="copy the weights in (safetensors), or fix model.host_path; nothing was stopped",
        )
    if len(files) > 1 or SHARD.search(files[0].name):
        raise ModelMissing(
            f"model folder {folder} holds sharded weights ({len(files)} files) but no {INDEX}",
            hint=f"copy {INDEX} from the checkpoint's source; nothing was stopped",
        )
    return files, None


def folder_fingerprint(folder: Path) -> str:
    """sha256 of config.json and the safetensors index, or of config.json and each weight
    file's name, size and mtime: cheap on a 100 GB checkpoint, and it changes when the weights do."""
    files, index = weight_files(folder)
    digest = hashlib.sha256()
    digest.update(b"config.json\0" + (folder / "config.json").read_bytes())
    if index is not None:
        digest.update(b"\0" + INDEX.encode() + b"\0" + index.read_bytes())
    else:
        for path in files:
            stat = path.stat()
            digest.update(f"\0{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
    return "sha256:" + digest.hexdigest()


def hub_repo_folder(cache: Path, repo: str) -> Path:
    return cache / ("models--" + repo.replace("/", "--"))


def hub_commit(cache: Path, repo: str, revision: str | None, *, required: bool = True) -> str | None:
    """The commit the hub cache holds for `repo` at `revision` (a branch or tag through refs/,
    or a commit hash), with its snapshot present; None when absent and not required."""
    revision = revision or "main"
    folder = hub_repo_folder(cache, repo)
    how = (
        f"download it on a host with access (`hf download {repo}"
        f"{'' if revision == 'main' else f' --revision {revision}'}`) into {cache}, or set model.offline: false "
        "to let the server download it; nothing was stopped"
    )
    if COMMIT.match(revision):
        commit = revision
    else:
        ref = folder / "refs" / revision
        try:
            commit = ref.read_text().strip()
        except OSError:
            if not required:
                return None
            what = (
                "is not in the hub cache"
                if not folder.is_dir()
                else f"has no revision {revision!r} in the hub cache"
            )
            raise ModelMissing(f"model {repo} {what} ({ref} is missing)", hint=how) from None
        if not COMMIT.match(commit):
            raise ModelMissing(f"{ref} does not hold a commit hash (got {commit[:60]!r})", hint=how)
    snapshot = folder / "snapshots" / commit
    if not (snapshot / "config.json").is_file():
        if not required:
            return None
        raise ModelMissing(
            f"model {repo} at {revision} ({commit[:12]}) has no complete snapshot in the hub cache "
            f"({snapshot / 'config.json'} is missing)",
            hint=how,
        )
    try:
        weight_files(snapshot)  # an interrupted download leaves shards out
    except ModelMissing as exc:
        if not required:
            return None
        raise ModelMissing(
            f"model {repo} at {revision} ({commit[:12]}) is incomplete in the hub cache: {exc.message}",
            hint=how,
        ) from None
    return commit


def describe_for_render(plan: ModelPlan) -> list[str]:
    if plan.kind == "hub":
        return [
            f"model {plan.repo} (revision {plan.revision or 'main'}) from the hub cache {plan.host_path} -> "
            f"{CONTAINER_HUB_CACHE}{' read-only, HF_HUB_OFFLINE=1' if plan.offline else ''}; "
            "`up` pins the commit it finds in refs/"
        ]
    if plan.kind == "folder":
        return [f"model folder {plan.host_path} -> {plan.container_path} (read-only)"]
    return []
