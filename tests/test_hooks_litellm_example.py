"""docs/hooks.md's LiteLLM example, its blocks run as they stand there, as deploytool runs hooks
(GatewayHooks: only the host's basics of deploytool's environment reach a hook), against a
stand-in for the proxy's model management endpoints on loopback. The proxy's address and admin
key are exported to deploytool too, to show that they do not reach the hooks: the example reads
them from the settings file it documents."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import serve_app
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from deploytool.deploy.hooks import GatewayHooks
from deploytool.deploy.steps import CutOver, Plan, Stop

DOC = Path(__file__).resolve().parents[1] / "docs" / "hooks.md"
KEY = "sk-litellm-admin-test"


def _blocks() -> dict[str, str]:
    """The LiteLLM section's blocks: the settings file and the two hooks, by the line before each."""
    section = DOC.read_text().split("## Worked example: LiteLLM", 1)[1]
    found = {}
    for lead, body in re.findall(r"([^\n]*)\n\n```sh\n(.*?)```", section, flags=re.S):
        if "litellm.env" in lead:
            found["settings"] = body
        elif lead.startswith("`pre-stop`"):
            found["pre-stop"] = body
        elif lead.startswith("`post-cutover`"):
            found["post-cutover"] = body
    assert {"pre-stop", "post-cutover"} <= set(found), found
    return found


def _proxy(models: dict[str, dict], calls: list[tuple[str, dict]]) -> Starlette:
    """LiteLLM's /model/new and /model/delete as the example uses them: the admin key as a bearer
    token, a deployment found by its model_info.id."""

    async def handle(request: Request) -> JSONResponse:
        if request.headers.get("authorization") != f"Bearer {KEY}":
            return JSONResponse({"error": "Authentication Error"}, status_code=401)
        body = json.loads(await request.body())
        calls.append((request.url.path, body))
        if request.url.path == "/model/new":
            models[body["model_info"]["id"]] = body
            return JSONResponse({"model_id": body["model_info"]["id"]})
        if body.get("id") not in models:
            return JSONResponse({"error": f"model {body.get('id')} not found"}, status_code=400)
        del models[body["id"]]
        return JSONResponse({"message": f"deleted {body['id']}"})

    return Starlette(
        routes=[
            Route("/model/new", handle, methods=["POST"]),
            Route("/model/delete", handle, methods=["POST"]),
        ]
    )


def test_the_litellm_example_takes_the_slot_out_and_puts_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = _blocks()
    hooks_dir, home = tmp_path / "hooks", tmp_path / "home"
    hooks_dir.mkdir(mode=0o755)
    for name, body in (("pre-stop", blocks["pre-stop"]), ("post-cutover", blocks["post-cutover"])):
        (hooks_dir / name).write_text(body)
        (hooks_dir / name).chmod(0o755)
    (hooks_dir / "post-rollback").symlink_to("post-cutover")
    models: dict[str, dict] = {}
    calls: list[tuple[str, dict]] = []
    with serve_app(_proxy(models, calls), "the LiteLLM stand-in") as url:
        settings = home / ".config" / "deploytool" / "litellm.env"
        settings.parent.mkdir(parents=True)
        documented = blocks.get("settings", "")
        settings.write_text(documented.replace("http://127.0.0.1:4000", url).replace("sk-...", KEY))
        settings.chmod(0o600)
        monkeypatch.setenv("HOME", str(home))
        # exported to deploytool, and still not the hooks' to see
        monkeypatch.setenv("LITELLM_URL", "http://127.0.0.1:9")
        monkeypatch.setenv("LITELLM_MASTER_KEY", "wrong")

        hooks = GatewayHooks(hooks_dir)
        first = Plan(
            action="up",
            slot="cpu-a",
            release=1,
            serving=None,
            fallback=None,
            url="http://127.0.0.1:31001",
            profile="sim",
            steps=[CutOver(release=1, previous=None, next_release=2)],
        )
        hooks.after_step(first, first.steps[0])
        assert models["cpu-a"]["litellm_params"]["api_base"] == "http://127.0.0.1:31001/v1"

        stop = Stop(release=1, container="c1", reason="handing over", url="http://127.0.0.1:31001")
        second = Plan(
            action="up",
            slot="cpu-a",
            release=2,
            serving=1,
            fallback=1,
            url="http://127.0.0.1:31001",
            profile="sim",
            steps=[stop, CutOver(release=2, previous=1, next_release=3)],
        )
        hooks.before_step(second, stop)  # raises HookFailed when the delete fails: the stop would be refused
        assert "cpu-a" not in models
        hooks.after_step(second, second.steps[1])
    assert [(path, body.get("id") or body["model_info"]["id"]) for path, body in calls] == [
        ("/model/new", "cpu-a"),
        ("/model/delete", "cpu-a"),
        ("/model/new", "cpu-a"),
    ]
    assert calls[-1][1]["model_name"] == "qwen3.6-35b-a3b"
    assert calls[-1][1]["litellm_params"]["model"] == "openai/qwen3.6-35b-a3b"
    assert os.environ["LITELLM_URL"] == "http://127.0.0.1:9"  # deploytool's own stayed as it was
