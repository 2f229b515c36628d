"""A profile as issue 13 shapes it, for tests that must not depend on that change landing."""

from __future__ import annotations


def keyed(profile, *, token: bool = True):
    """The profile as issue 13 shapes it (server.api_key, secrets.hf_token: where the values
    live on a Docker host), without depending on that change: subclasses with the two fields."""
    from pydantic import BaseModel

    from deploytool.profiles import Profile, ServerSpec

    class KeyedServer(ServerSpec):
        api_key: dict | None = None

    class Secrets(BaseModel):
        hf_token: dict | None = None

    class KeyedProfile(Profile):
        secrets: Secrets = Secrets()

    server = KeyedServer(**profile.server.model_dump(), api_key={"file": "/etc/deploytool/api-key"})
    return KeyedProfile(**{**profile.model_dump(), "server": server,
                           "secrets": Secrets(hf_token={"env": "HF_TOKEN"} if token else None)})


def from_hub(profile, *, repo: str = "nvidia/Qwen3.6-35B-A3B-NVFP4", revision: str | None = "main",
             offline: bool = True):
    """The profile with issue 13's model.hub / revision / offline, as subclasses."""
    from deploytool.profiles import ModelSpec, Profile

    class HubModel(ModelSpec):
        hub: str | None = None
        revision: str | None = None
        offline: bool = True

    class HubProfile(Profile):
        model: HubModel

    model = HubModel(**{**profile.model.model_dump(), "host_path": None}, hub=repo, revision=revision, offline=offline)
    return HubProfile(**{**profile.model_dump(), "model": model})
