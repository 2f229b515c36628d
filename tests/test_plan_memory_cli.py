"""`deploytool plan-memory` as a user runs it: a table for every shipped card profile, JSON,
what-ifs that turn the verdict, and clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

MODELS = Path(__file__).parent / "data" / "models"
# each shipped card profile and the test checkpoint of its model
CARD_PROFILES = {
    "rtx5090-qwen3.6-35b-a3b-nvfp4": "qwen3.6-35b-a3b-nvfp4",
    "rtx5090-qwen3.6-35b-a3b-nvfp4-stock": "qwen3.6-35b-a3b-nvfp4",
    "rtx-pro-6000-qwen3.6-35b-a3b-nvfp4": "qwen3.6-35b-a3b-nvfp4",
    "h200-qwen3.6-35b-a3b-fp8": "qwen3.6-35b-a3b-fp8",
    "b300x8-glm5.2-nvfp4-tp8": "glm-5.2-nvfp4",
    "b300x8-glm5.2-nvfp4-tep8": "glm-5.2-nvfp4",
    "gb300x4-glm5.2-nvfp4-tp4": "glm-5.2-nvfp4",
}


@pytest.mark.parametrize("profile", sorted(CARD_PROFILES))
def test_every_card_profile_prints_its_plan(profile: str) -> None:
    checkpoint = MODELS / CARD_PROFILES[profile]
    proc = run_cli("plan-memory", "--profile", profile, "--checkpoint", str(checkpoint))
    for row in (
        "weights: target model (GiB)",
        "weights: draft model",
        "patches assumed:",
        "KV bytes per token",
        "state per running request",
        "KV pool (tokens)",
        "max running requests",
        "verdict",
    ):
        assert row in proc.stdout, (row, proc.stdout, proc.stderr)
    data = json.loads(
        run_cli("plan-memory", "--profile", profile, "--checkpoint", str(checkpoint), "--json").stdout
    )
    assert data["profile"] == profile and data["card_source"] == "table"
    assert data["pool_tokens"] > 0 and data["kv_bytes_per_token"] > 0
    # the exit code is the verdict
    assert proc.returncode == (0 if data["verdict"] == "fits" else 1)
    if data["verdict"] == "error":
        assert "error:" in proc.stdout


def test_the_rtx5090_profile_fits_with_its_patches_and_says_which_it_assumed() -> None:
    """The source's own finding, both ways: with stock wheels (`--patches none`) MTP fits neither
    a full 256K conversation nor eight requests on 32 GB; with the series it fits both."""
    base = [
        "plan-memory",
        "--profile",
        "rtx5090-qwen3.6-35b-a3b-nvfp4",
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-nvfp4"),
    ]
    patched = run_cli(*base)
    assert patched.returncode == 0, patched.stdout
    assert "patches assumed: 0001-nvml-device-capability.patch" in patched.stdout
    assert (
        "0002-draft-shares-embed-and-head-before-pool.patch: the MTP draft takes the target's"
        in patched.stdout
    )
    stock = run_cli(*base, "--patches", "none", "--json")
    data = json.loads(stock.stdout)
    assert stock.returncode == 1 and data["verdict"] == "error" and data["patches"] == []
    # the pinned state slots still give 8 requests; the draft's memory takes the 256K pool
    assert data["pool_tokens"] < 262_144 and data["max_running_requests"] == 8
    assert any("smaller than one full-context conversation" in p for p in data["problems"])
    one = json.loads(
        run_cli(*base, "--patches", "0002-draft-shares-embed-and-head-before-pool.patch", "--json").stdout
    )
    assert [p.split(":")[0] for p in one["patches"]] == ["0002-draft-shares-embed-and-head-before-pool.patch"]
    assert (
        data["pool_tokens"] < one["pool_tokens"] < json.loads(run_cli(*base, "--json").stdout)["pool_tokens"]
    )


def test_an_unknown_patch_in_a_what_if_is_refused_with_the_known_ones() -> None:
    proc = run_cli(
        "plan-memory",
        "--profile",
        "rtx5090-qwen3.6-35b-a3b-nvfp4",
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-nvfp4"),
        "--patches",
        "0009-nope.patch",
    )
    assert proc.returncode == 2
    assert "--patches: 0009-nope.patch not in" in proc.stderr
    assert (
        "known: 0001-nvml-device-capability.patch, 0002-draft-shares-embed-and-head-before-pool.patch"
        in proc.stderr
    )
    mixed = run_cli(
        "plan-memory", "--profile", "rtx5090-qwen3.6-35b-a3b-nvfp4", "--patches", "none,0002-x.patch"
    )
    assert (
        mixed.returncode == 2
        and "expected `none`, `series` or patch file names" in mixed.stdout + mixed.stderr
    )


def test_a_what_if_that_shrinks_the_pool_below_the_context_turns_the_verdict_into_an_error() -> None:
    base = [
        "plan-memory",
        "--profile",
        "h200-qwen3.6-35b-a3b-fp8",
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-fp8"),
        "--json",
    ]
    fits = json.loads(run_cli(*base).stdout)
    assert fits["verdict"] == "fits"
    shrunk = run_cli(*base, "--set", "mem-fraction-static=0.31")
    data = json.loads(shrunk.stdout)
    assert shrunk.returncode == 1 and data["verdict"] == "error"
    assert data["pool_tokens"] < 262_144
    assert data["overrides"] == {"mem-fraction-static": 0.31}
    assert any("smaller than one full-context conversation" in p for p in data["problems"])


def test_fp8_kv_doubles_the_pool_tokens_of_the_same_bytes() -> None:
    base = [
        "plan-memory",
        "--profile",
        "h200-qwen3.6-35b-a3b-fp8",
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-fp8"),
        "--json",
    ]
    bf16 = json.loads(run_cli(*base).stdout)
    fp8 = json.loads(run_cli(*base, "--set", "kv-cache-dtype=fp8_e4m3").stdout)
    assert fp8["kv_bytes_per_token"] * 2 == bf16["kv_bytes_per_token"]
    assert abs(fp8["pool_tokens"] - 2 * bf16["pool_tokens"]) <= 2


def test_fewer_running_requests_than_preflight_asks_is_an_error() -> None:
    proc = run_cli(
        "plan-memory",
        "--profile",
        "h200-qwen3.6-35b-a3b-fp8",
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-fp8"),
        "--set",
        "max-running-requests=8",
        "--json",
    )
    data = json.loads(proc.stdout)
    assert proc.returncode == 1
    assert any("min_running_requests 64" in p for p in data["problems"])


def test_bad_input_is_refused_clearly(tmp_path: Path) -> None:
    (tmp_path / "bare.yaml").write_text(
        "name: bare\nextends: h200-qwen3.6-35b-a3b-fp8\nmodel: {config: null}\n"
    )
    no_checkpoint = run_cli(
        "plan-memory",
        "--profile",
        "bare",
        "--profiles-dir",
        str(tmp_path),
        env={"DEPLOYTOOL_HF_HOME": str(tmp_path / "hf")},
    )
    assert no_checkpoint.returncode == 2 and "model.host_path" in no_checkpoint.stderr
    assert "--checkpoint DIR" in no_checkpoint.stderr
    bad_set = run_cli("plan-memory", "--profile", "h200-qwen3.6-35b-a3b-fp8", "--set", "nonsense")
    assert bad_set.returncode == 2 and "KEY=VALUE" in bad_set.stderr
    bad_card = run_cli(
        "plan-memory",
        "--profile",
        "h200-qwen3.6-35b-a3b-fp8",
        "--card",
        "a100",
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-fp8"),
    )
    assert bad_card.returncode == 2 and "known cards" in bad_card.stderr
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    broken = run_cli("plan-memory", "--profile", "h200-qwen3.6-35b-a3b-fp8", "--checkpoint", str(tmp_path))
    assert (
        broken.returncode == 2 and "num_attention_heads" in broken.stderr and "config.json" in broken.stderr
    )


def test_gpu_without_a_driver_exits_4() -> None:
    proc = run_cli(
        "plan-memory",
        "--profile",
        "h200-qwen3.6-35b-a3b-fp8",
        "--gpu",
        "GPU-0000",
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-fp8"),
    )
    if proc.returncode == 2:  # a machine with a driver: the UUID is unknown there
        assert "no such GPU" in proc.stderr
    else:
        assert proc.returncode == 4 and "NVML" in proc.stderr


def test_profiles_list_says_whether_each_profiles_memory_plan_fits_its_card() -> None:
    """Every shipped card profile passes its own memory plan on its own card, planned from the
    test checkpoints (--checkpoints DIR: DIR/<the hub repository's name>)."""
    proc = run_cli("profiles", "list", "--checkpoints", str(MODELS), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r["memory"] for r in json.loads(proc.stdout)["profiles"]}
    for name in CARD_PROFILES:
        assert rows[name]["verdict"] == "fits", (name, rows[name])
        assert rows[name]["checkpoint"].endswith(CARD_PROFILES[name])
    assert rows["rtx5090-qwen3.6-35b-a3b-nvfp4-stock"]["patches"] == []
    assert (
        "0002-draft-shares-embed-and-head-before-pool.patch"
        in rows["rtx5090-qwen3.6-35b-a3b-nvfp4"]["patches"]
    )
    assert rows["sim"] == {"verdict": "unknown", "why": "the reference runtime loads no checkpoint"}
    table = run_cli("profiles", "list", "--checkpoints", str(MODELS)).stdout
    assert "memory plan on its card" in table
    line = next(x for x in table.splitlines() if "rtx5090-qwen3.6-35b-a3b-nvfp4-stock" in x)
    assert f"fits: {rows['rtx5090-qwen3.6-35b-a3b-nvfp4-stock']['pool_tokens']:,} tokens, 8 requests" in line


def test_profiles_list_without_a_checkpoint_config_says_so(tmp_path: Path) -> None:
    (tmp_path / "bare.yaml").write_text(
        "name: bare\nextends: rtx5090-qwen3.6-35b-a3b-nvfp4\nmodel: {config: null}\n"
    )
    rows = {
        r["name"]: r["memory"]
        for r in json.loads(
            run_cli(
                "profiles",
                "list",
                "--json",
                "--profiles-dir",
                str(tmp_path),
                env={"DEPLOYTOOL_HF_HOME": str(tmp_path / "hf")},
            ).stdout
        )["profiles"]
    }
    assert rows["bare"]["verdict"] == "unknown"
    assert "no checkpoint config here" in rows["bare"]["why"]
    # the shipped profile carries its config: planned with no weights here
    assert rows["rtx5090-qwen3.6-35b-a3b-nvfp4"]["verdict"] == "fits"


def test_patch_what_ifs_read_the_profiles_own_series_folder(tmp_path: Path) -> None:
    """A profile whose image takes another series (image.source.series, e.g. one `patches
    import` wrote): `--patches series` and `--patches NAME` plan that folder's patches, not the
    release's shipped ones."""
    series = tmp_path / "my-series"
    series.mkdir()
    (series / "0001-share-vocab.patch").write_text("")
    (series / "0002-nothing.patch").write_text("")
    (series / "series").write_text("0001-share-vocab.patch\n0002-nothing.patch\n")
    (series / "memory.yaml").write_text(
        "patches:\n"
        "  0001-share-vocab.patch: {effects: [draft_shares_target_vocab], why: the draft shares the vocabulary}\n"
        "  0002-nothing.patch: {effects: [], why: no change to the pools}\n"
    )
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "own-series.yaml").write_text(
        "name: own-series\nextends: rtx5090-qwen3.6-35b-a3b-nvfp4\n"
        f"image: {{source: {{kind: wheel, series: {series}}}}}\n"
    )
    base = [
        "plan-memory",
        "--profile",
        "own-series",
        "--profiles-dir",
        str(profiles),
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-nvfp4"),
        "--json",
    ]
    whole = run_cli(*base, "--patches", "series")
    assert [p.split(":")[0] for p in json.loads(whole.stdout)["patches"]] == [
        "0001-share-vocab.patch",
        "0002-nothing.patch",
    ], whole.stderr
    one = run_cli(*base, "--patches", "0002-nothing.patch")
    assert [p.split(":")[0] for p in json.loads(one.stdout)["patches"]] == ["0002-nothing.patch"], one.stderr
    shipped = run_cli(*base, "--patches", "0003-mtp-draft-fp8-at-load.patch")
    assert shipped.returncode == 2 and f"not in {series}" in shipped.stderr


def test_a_what_if_on_a_flag_the_plan_does_not_read_is_refused_with_the_fix() -> None:
    base = [
        "plan-memory",
        "--profile",
        "h200-qwen3.6-35b-a3b-fp8",
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-fp8"),
    ]
    typo = run_cli(*base, "--set", "no-such-flag=1")
    assert typo.returncode == 2 and "--set no-such-flag" in typo.stderr and "change nothing" in typo.stderr
    close = run_cli(*base, "--set", "mem-fraction-statc=0.8", "--json")
    assert close.returncode == 2
    error = json.loads(close.stdout)["error"]
    assert "--set mem-fraction-static=" in json.dumps(error)
    assert run_cli(*base, "--set", "mem_fraction_static=0.8").returncode in (
        0,
        1,
    )  # a flag it reads, either spelling


def test_the_flags_the_planner_checks_are_the_flags_it_reads() -> None:
    """The refusal's known set is the launch flags inputs_from_profile and the start-up rules read, no more, no less."""
    import inspect
    import re

    from deploytool.memory import profile_plan, startup, what_if

    read = set(re.findall(r'args\.get\("([a-z-]+)"', inspect.getsource(profile_plan.inputs_from_profile)))
    assert read == set(what_if.PLANNER_FLAGS)
    rules = set(re.findall(r'_flag\(args, "([a-z-]+)"\)', inspect.getsource(startup)))
    assert rules == set(startup.FLAGS_READ)


def test_a_card_too_small_for_the_weights_says_so_in_words() -> None:
    proc = run_cli(
        "plan-memory",
        "--profile",
        "h200-qwen3.6-35b-a3b-fp8",
        "--card",
        "rtx5090",
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-fp8"),
    )
    assert proc.returncode == 1
    assert "None" not in proc.stdout
    assert "no slots: the weights leave no memory" in proc.stdout


def test_checkpoint_files_that_are_not_json_objects_are_refused_in_words(tmp_path: Path) -> None:
    """The checkpoint folder comes from outside: a config.json, safetensors index or
    hf_quant_config.json holding a list or a bare value is a usage error naming the file, not a
    traceback from its first key."""
    config = (MODELS / "qwen3.6-35b-a3b-fp8" / "config.json").read_text()
    cases = {
        "config": {"config.json": "[1, 2]"},
        "index": {"config.json": config, "model.safetensors.index.json": '"total_size"'},
        "quant": {
            "config.json": json.dumps({**json.loads(config), "quantization_config": None}),
            "hf_quant_config.json": "[]",
        },
    }
    for case, files in cases.items():
        folder = tmp_path / case
        folder.mkdir()
        for name, text in files.items():
            (folder / name).write_text(text)
        bad = next(name for name in files if name != "config.json" or case == "config")
        proc = run_cli(
            "plan-memory", "--profile", "h200-qwen3.6-35b-a3b-fp8", "--checkpoint", str(folder), "--json"
        )
        error = json.loads(proc.stdout)["error"]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (case, proc.stderr)
        assert error["message"].startswith(f"{folder / bad}: expected a JSON object"), (case, error)


def test_the_planners_what_ifs_name_their_fields_and_the_cli_says_the_flags() -> None:
    """A library caller reads which field of the request was wrong; the person at the terminal
    reads the same words as ever, with the flag that set it."""
    from deploytool.errors import FieldError
    from deploytool.memory.cards import card_from_table
    from deploytool.memory.what_if import parse_patches, parse_sets

    checkpoint = str(MODELS / "qwen3.6-35b-a3b-fp8")
    cases = [
        (
            lambda: parse_sets(["nonsense"]),
            ["--set", "nonsense"],
            "sets",
            "--set 'nonsense': expected KEY=VALUE, e.g. --set mem-fraction-static=0.90",
        ),
        (
            None,
            ["--set", "no-such-flag=1"],
            "sets",
            "--set no-such-flag: the memory plan reads no such flag, so this what-if would change nothing",
        ),
        (
            lambda: parse_patches("none,x.patch"),
            ["--patches", "none,x.patch"],
            "patches",
            "--patches 'none,x.patch': expected `none`, `series` or patch file names separated by commas",
        ),
        (
            lambda: card_from_table("a100"),
            ["--card", "a100"],
            "card",
            "--card a100: not a card deploytool knows",
        ),
        (
            None,
            ["--card", "h200:0"],
            "card",
            "--card h200:0: expected NAME or NAME:COUNT with a whole number of cards, e.g. --card h200:2",
        ),
    ]
    for call, args, field, message in cases:
        if call is not None:
            with pytest.raises(FieldError) as caught:
                call()
            assert caught.value.field == field and caught.value.message == message.replace(args[0], field, 1)
        proc = run_cli(
            "plan-memory",
            "--profile",
            "h200-qwen3.6-35b-a3b-fp8",
            "--checkpoint",
            checkpoint,
            *args,
            "--json",
        )
        error = json.loads(proc.stdout)["error"]
        assert proc.returncode == 2 and error["kind"] == "UsageError", (args, error)
        assert error["message"] == message and f"error: {message}" in proc.stderr, (args, error)


def test_a_profile_card_the_table_lacks_is_the_profiles_field_not_a_flag(tmp_path: Path) -> None:
    """Without --card the card comes from the profile's match.gpu_name: a name the table lacks is
    refused as that field of that file, not as a --card the person never gave."""
    (tmp_path / "v100.yaml").write_text(
        "name: v100\nextends: h200-qwen3.6-35b-a3b-fp8\nmatch: {gpu_name: [Tesla V100-SXM2-32GB]}\n"
    )
    proc = run_cli(
        "plan-memory",
        "--profile",
        "v100",
        "--profiles-dir",
        str(tmp_path),
        "--checkpoint",
        str(MODELS / "qwen3.6-35b-a3b-fp8"),
        "--json",
    )
    error = json.loads(proc.stdout)["error"]
    assert proc.returncode == 2 and "--card" not in error["message"], error
    assert error["message"] == (
        f"profile v100 ({tmp_path / 'v100.yaml'}): match.gpu_name 'Tesla V100-SXM2-32GB': "
        "not a card deploytool knows"
    )
    assert "known cards: " in error["hint"]
