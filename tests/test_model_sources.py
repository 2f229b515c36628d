"""Where the weights come from: profile rules with file:line errors, the checks `up`
makes before anything is stopped, the fingerprint and the hub commit, and what the compose
file mounts. The real-engine side is in tests/test_release_secrets.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fake_checkpoints import write_hub_cache, write_model_folder

from deploytool.errors import ProfileError
from deploytool.host import labels
from deploytool.host.slots import Slot
from deploytool.profiles import ProfileStore
from deploytool.release import weights
from deploytool.release.compose import RenderRequest, render_compose, render_text, write_compose
from deploytool.release.inputs import beyond_loopback, prepare

GPU = "GPU-5f3c0a8e-1111-2222-3333-444455556666"
REPO = "nvidia/Qwen3.6-35B-A3B-NVFP4"


def store_with(tmp_path: Path, name: str, text: str) -> ProfileStore:
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    return ProfileStore([folder])


def card(tmp_path: Path, model_yaml: str, extra: str = "") -> str:
    return f"name: c\nextends: rtx5090-qwen3.6-35b-a3b-nvfp4\n{model_yaml}{extra}"


# -- profile rules ---------------------------------------------------------------------------------
def test_both_sources_are_refused_at_the_line_that_set_them(tmp_path: Path) -> None:
    store = store_with(tmp_path, "c", card(tmp_path, "model:\n  host_path: /srv/m\n"))
    with pytest.raises(ProfileError) as err:
        store.get("c")
    assert (
        f"{tmp_path}/profiles/c.yaml:4: model.host_path: give model.hub or model.host_path, not both"
        in str(err.value)
    )


def test_a_real_runtime_profile_must_name_its_weights(tmp_path: Path) -> None:
    store = store_with(tmp_path, "c", card(tmp_path, "model:\n  hub: null\n"))
    with pytest.raises(ProfileError, match=r"c\.yaml:3: model: say where the weights are"):
        store.get("c")


@pytest.mark.parametrize(
    "model_yaml, where, what",
    [
        ("model:\n  hub: not-a-repo-id\n", 4, "model.hub: expected a hub repository id ORG/NAME"),
        (
            "model:\n  hub: null\n  host_path: relative/dir\n",
            5,
            "model.host_path: expected an absolute host folder",
        ),
        (
            "model:\n  hub: null\n  host_path: /srv/m\n  revision: main\n",
            6,
            "model.revision: revision is for model.hub only",
        ),
        (
            "server:\n  args:\n    model-path: /elsewhere\n",
            5,
            "server.args.model-path: deploytool passes --model-path",
        ),
        ("server:\n  args:\n    api-key: sk-123\n", 5, "server.args.api-key: a key on the command line"),
        ("server:\n  env:\n    HF_TOKEN: hf_abc\n", 5, "server.env.HF_TOKEN: a token in the profile"),
        (
            "server:\n  api_key: {env: A, file: /b}\n",
            4,
            "server.api_key: Value error, give exactly one of env",
        ),
        (
            "server:\n  api_key: {env: K}\n  args:\n    config: /x.yaml\n",
            6,
            "server.args.config: deploytool passes the API key",
        ),
        (
            "server:\n  api_key: {env: K}\n  args:\n    tokenizer-worker-num: 4\n",
            6,
            "server.args.tokenizer-worker-num: SGLang 0.5.23 does not support an API key with more than one",
        ),
        (
            "server:\n  api_key: {env: K}\n  args:\n    grpc-port: 30001\n",
            6,
            "server.args.grpc-port: SGLang 0.5.23 refuses",
        ),
    ],
)
def test_model_and_secret_mistakes_name_file_line_and_fix(
    tmp_path: Path, model_yaml: str, where: int, what: str
) -> None:
    store = store_with(tmp_path, "c", card(tmp_path, model_yaml))
    with pytest.raises(ProfileError) as err:
        store.get("c")
    assert f"c.yaml:{where}: {what}" in str(err.value), str(err.value)


def test_switching_a_card_to_a_folder_as_its_comment_says(tmp_path: Path) -> None:
    profile = store_with(tmp_path, "c", card(tmp_path, "model: {hub: null, host_path: /srv/models/Q}\n")).get(
        "c"
    )
    assert profile.model.hub is None and profile.launch_args()["model-path"] == "/models/Q"


# -- the folder check and fingerprint --------------------------------------------------------------
def test_folder_checks_name_the_path_and_what_to_do(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(weights.ModelMissing) as err:
        weights.folder_fingerprint(missing)
    assert str(missing) in err.value.message and "nothing was stopped" in (err.value.hint or "")
    folder = write_model_folder(tmp_path / "m")
    (folder / "config.json").unlink()
    with pytest.raises(weights.ModelMissing, match=r"no config.json"):
        weights.folder_fingerprint(folder)
    empty = tmp_path / "e"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    with pytest.raises(weights.ModelMissing, match=r"no \*\.safetensors"):
        weights.folder_fingerprint(empty)


def test_sharded_weights_need_their_index_and_every_shard(tmp_path: Path) -> None:
    folder = write_model_folder(tmp_path / "s", shards=3)
    first = weights.folder_fingerprint(folder)
    (folder / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(weights.ModelMissing, match=r"lacks 1 of the 3 shards.*model-00002-of-00003"):
        weights.folder_fingerprint(folder)
    write_model_folder(tmp_path / "s", shards=3)
    (folder / weights.INDEX).unlink()
    with pytest.raises(
        weights.ModelMissing, match=r"sharded weights .3 files. but no model.safetensors.index.json"
    ):
        weights.folder_fingerprint(folder)
    write_model_folder(tmp_path / "s", shards=3)
    assert weights.folder_fingerprint(folder) == first  # same config and index: same weights


def test_fingerprint_follows_config_and_weight_files(tmp_path: Path) -> None:
    folder = write_model_folder(tmp_path / "m")
    first = weights.folder_fingerprint(folder)
    assert first.startswith("sha256:") and weights.folder_fingerprint(folder) == first
    weight_file = folder / "model.safetensors"
    os.utime(weight_file, ns=(weight_file.stat().st_atime_ns, weight_file.stat().st_mtime_ns + 10**9))
    second = weights.folder_fingerprint(folder)
    assert second != first  # re-copied weights
    write_model_folder(folder, config={"model_type": "other"})
    assert weights.folder_fingerprint(folder) not in (first, second)


# -- the hub cache ---------------------------------------------------------------------------------
def test_hub_commit_comes_from_refs_and_needs_its_snapshot(tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    commit = write_hub_cache(cache, REPO)
    assert weights.hub_commit(cache, REPO, None) == commit
    assert weights.hub_commit(cache, REPO, commit) == commit  # a commit is taken as is
    with pytest.raises(
        weights.ModelMissing, match=r"has no revision 'v2' in the hub cache .*refs/v2 is missing"
    ):
        weights.hub_commit(cache, REPO, "v2")
    with pytest.raises(weights.ModelMissing, match="model nvidia/Other is not in the hub cache") as err:
        weights.hub_commit(cache, "nvidia/Other", None)
    assert "hf download nvidia/Other" in (err.value.hint or "")
    assert weights.hub_commit(cache, "nvidia/Other", None, required=False) is None
    snapshot = cache / "models--nvidia--Qwen3.6-35B-A3B-NVFP4" / "snapshots" / commit
    (snapshot / "model.safetensors").unlink()  # an interrupted download
    with pytest.raises(weights.ModelMissing, match=r"is incomplete in the hub cache: .* no \*\.safetensors"):
        weights.hub_commit(cache, REPO, "main")
    (snapshot / "config.json").unlink()
    with pytest.raises(weights.ModelMissing, match="no complete snapshot"):
        weights.hub_commit(cache, REPO, "main")


def test_hub_cache_setting_and_huggingface_defaults() -> None:
    assert weights.host_hub_cache({"DEPLOYTOOL_HF_HOME": "/a", "HF_HOME": "/b"}) == Path("/a/hub")
    assert weights.host_hub_cache({"HF_HUB_CACHE": "/c", "HF_HOME": "/b"}) == Path("/c")
    assert weights.host_hub_cache({"HF_HOME": "/b"}) == Path("/b/hub")
    assert weights.host_hub_cache({"HOME": "/home/u"}) == Path("/home/u/.cache/huggingface/hub")


# -- what up prepares and the compose file holds ---------------------------------------------------
def test_hub_release_mounts_the_cache_offline_and_pins_the_commit(tmp_path: Path) -> None:
    commit = write_hub_cache(tmp_path / "hf" / "hub", REPO)
    profile = ProfileStore().get("rtx5090-qwen3.6-35b-a3b-nvfp4")
    inputs = prepare(profile, bind="127.0.0.1", env={"DEPLOYTOOL_HF_HOME": str(tmp_path / "hf")})
    assert inputs.model.commit == commit and inputs.warnings == []
    req = RenderRequest(
        profile=profile, slot=Slot((GPU,)), release=2, image="x:y", model=inputs.model, secrets=inputs.secrets
    )
    server = render_compose(req)["services"]["server"]
    command = server["command"]
    assert (
        command[command.index("--model-path") + 1] == REPO
        and command[command.index("--revision") + 1] == commit
    )
    assert {
        "type": "bind",
        "source": str(tmp_path / "hf" / "hub"),
        "target": weights.CONTAINER_HUB_CACHE,
        "read_only": True,
    } in server["volumes"]
    assert server["environment"]["HF_HUB_OFFLINE"] == "1"
    assert server["environment"]["HF_HUB_CACHE"] == weights.CONTAINER_HUB_CACHE
    assert server["labels"][labels.MODEL] == f"hub:{REPO}@{commit}"
    assert inputs.record(profile, "127.0.0.1")["model"]["commit"] == commit
    assert (inputs.model.checkpoint_folder() / "config.json").is_file()  # the snapshot, for config readers
    compose_file = write_compose(req, tmp_path / "compose.yaml")
    subprocess.run(["docker", "compose", "-f", str(compose_file), "config", "--quiet"], check=True)


def test_missing_hub_snapshot_fails_prepare_unless_online(tmp_path: Path) -> None:
    env = {"DEPLOYTOOL_HF_HOME": str(tmp_path / "hf")}
    profile = ProfileStore().get("rtx5090-qwen3.6-35b-a3b-nvfp4")
    with pytest.raises(weights.ModelMissing, match=f"model {REPO} is not in the hub cache"):
        prepare(profile, bind="127.0.0.1", env=env)
    online = profile.model_copy(deep=True)
    online.model.offline = False
    inputs = prepare(online, bind="127.0.0.1", env=env)
    assert inputs.model.commit is None and any("will download" in w for w in inputs.warnings)
    server = render_compose(
        RenderRequest(profile=online, slot=Slot((GPU,)), release=1, image="x:y", model=inputs.model)
    )["services"]["server"]
    assert "HF_HUB_OFFLINE" not in server["environment"]
    assert (
        next(v for v in server["volumes"] if v["target"] == weights.CONTAINER_HUB_CACHE)["read_only"] is False
    )


def test_folder_release_mounts_read_only_where_the_server_looks(tmp_path: Path) -> None:
    folder = write_model_folder(tmp_path / "Q")
    store = store_with(tmp_path, "c", card(tmp_path, f"model: {{hub: null, host_path: {folder}}}\n"))
    profile = store.get("c")
    inputs = prepare(profile, bind="127.0.0.1", env={})
    server = render_compose(
        RenderRequest(profile=profile, slot=Slot((GPU,)), release=1, image="x:y", model=inputs.model)
    )["services"]["server"]
    assert {"type": "bind", "source": str(folder), "target": "/models/Q", "read_only": True} in server[
        "volumes"
    ]
    assert server["command"][server["command"].index("--model-path") + 1] == "/models/Q"
    assert "--revision" not in server["command"] and "HF_HUB_OFFLINE" not in server["environment"]
    assert server["labels"][labels.MODEL] == f"folder:{folder}#{inputs.model.fingerprint[7:23]}"


def test_render_shows_where_secrets_go_never_their_values(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("hf_SECRET_VALUE_1\n")
    store = store_with(
        tmp_path,
        "c",
        card(
            tmp_path,
            "",
            f"secrets:\n  hf_token: {{file: {token_file}}}\nserver:\n  api_key: {{env: MY_KEY}}\n",
        ),
    )
    profile = store.get("c")
    text = render_text(RenderRequest(profile=profile, slot=Slot((GPU,)), release=1, image="x:y"))
    assert "hf_SECRET_VALUE_1" not in text
    assert f"# secret hf_token: host file {token_file} -> /run/secrets/hf_token" in text
    assert "# secret sglang_config: host env MY_KEY -> /run/secrets/deploytool-sglang-config.yaml" in text
    server = render_compose(RenderRequest(profile=profile, slot=Slot((GPU,)), release=1, image="x:y"))
    service = server["services"]["server"]
    assert service["command"][-2:] == ["--config", "/run/secrets/deploytool-sglang-config.yaml"]
    assert service["environment"]["HF_TOKEN_PATH"] == "/run/secrets/hf_token"
    assert service["healthcheck"]["test"][5:7] == ["-H", "@/run/secrets/deploytool-auth-header"]
    assert server["secrets"]["hf_token"] == {"environment": "DEPLOYTOOL_SECRET_HF_TOKEN"}
    assert service["labels"][labels.API_KEY] == "required"


def test_bind_beyond_loopback_without_a_key_warns(tmp_path: Path) -> None:
    assert (
        not beyond_loopback("127.0.0.1") and not beyond_loopback("::1") and not beyond_loopback("localhost")
    )
    assert beyond_loopback("0.0.0.0") and beyond_loopback("192.168.1.5") and beyond_loopback("::")
    profile = ProfileStore().get("sim")
    assert any("without an API key" in w for w in prepare(profile, bind="0.0.0.0", env={}).warnings)
    assert prepare(profile, bind="127.0.0.1", env={}).warnings == []
    keyed = profile.model_copy(deep=True)
    from deploytool.profiles import SecretError, SecretRef

    keyed.server.api_key = SecretRef(env="K")
    assert prepare(keyed, bind="0.0.0.0", env={"K": "v"}).warnings == []
    with pytest.raises(SecretError, match="environment variable K, which is not set"):
        prepare(keyed, bind="0.0.0.0", env={})


def test_a_secret_file_others_can_read_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("v\n")
    key_file.chmod(0o644)
    profile = ProfileStore().get("sim").model_copy(deep=True)
    from deploytool.profiles import SecretError, SecretRef

    profile.server.api_key = SecretRef(file=str(key_file))
    with pytest.raises(SecretError) as caught:  # tests/test_secret_files_are_the_deployers.py: the whole rule
        prepare(profile, bind="127.0.0.1", env={})
    assert caught.value.hint == f"chmod 600 {key_file}"
    key_file.chmod(0o600)
    assert prepare(profile, bind="127.0.0.1", env={}).warnings == []
