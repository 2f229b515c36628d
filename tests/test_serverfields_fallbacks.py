"""Where deploytool reads each server figure: SGLang 0.5.23's place first, the older place only
when the new one is absent (deploytool.server.serverfields)."""

from __future__ import annotations

from deploytool.server import serverfields


def test_running_limit_is_the_effective_value_per_dp_rank_summed() -> None:
    info = {
        "max_running_requests": None,
        "dp_size": 2,
        "internal_states": [
            {"max_running_requests": None, "effective_max_running_requests_per_dp": 48},
            {"max_running_requests": None, "effective_max_running_requests_per_dp": 48},
        ],
    }
    assert serverfields.running_limit(info) == (96, "internal_states[].effective_max_running_requests_per_dp")
    # the flag may say more than the server runs: the effective value wins
    info["max_running_requests"] = 128
    assert serverfields.running_limit(info)[0] == 96
    one_entry = {"dp_size": 4, "internal_states": [{"effective_max_running_requests_per_dp": 10}]}
    assert serverfields.running_limit(one_entry)[0] == 40


def test_running_limit_falls_back_to_the_flag_on_servers_without_the_effective_field() -> None:
    assert serverfields.running_limit({"max_running_requests": 64, "internal_states": [{}]}) == (
        64,
        "max_running_requests",
    )
    assert serverfields.running_limit({"internal_states": [{"max_running_requests": 32}]})[0] == 32
    assert serverfields.running_limit({"max_running_requests": None}) == (None, "not reported")


def test_context_length_comes_from_v1_models_first() -> None:
    models = {"data": [{"id": "m", "max_model_len": 131072}]}
    assert serverfields.context_length(models, {"context_length": None}) == (
        131072,
        "/v1/models max_model_len",
    )
    assert serverfields.context_length({"data": [{"id": "m"}]}, {"context_length": 8192})[0] == 8192
    assert serverfields.context_length(None, None, {"context_length": 4096})[0] == 4096
    assert serverfields.context_length(None, {"context_length": None}) == (None, "not reported")


def test_kv_pool_memory_and_weight_version() -> None:
    usage = {
        "weight": 60.1,
        "kvcache": 50.0,
        "startup_available": 130.0,
        "token_capacity": 900000,
        "token_capacity_swa": None,
        "graph": {"decode": 1.2},
    }
    info = {"internal_states": [{"memory_usage": usage}]}
    assert serverfields.memory_usage(info) == [usage]
    assert serverfields.kv_pool_tokens(info) == 900000
    assert serverfields.kv_pool_tokens({"max_total_num_tokens": 5, **info}) == 5
    assert serverfields.weight_version({"weight_version": "v7"}) == "v7"
    assert serverfields.weight_version({}) is None
    assert (
        serverfields.MODEL_INFO_PATHS[0] == "/model_info"
        and serverfields.SERVER_INFO_PATHS[0] == "/server_info"
    )
