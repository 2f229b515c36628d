"""Card profiles with their secret and hub fields set, for the Kubernetes render tests."""

from __future__ import annotations

from deploytool.profiles import Profile, SecretRef


def keyed(profile: Profile, *, token: bool = True) -> Profile:
    """The profile with server.api_key and (by default) secrets.hf_token: where the values live
    on a Docker host; on Kubernetes they name keys of the Secret."""
    keyed = profile.model_copy(deep=True)
    keyed.server.api_key = SecretRef(file="/etc/deploytool/api-key")
    keyed.secrets.hf_token = SecretRef(env="HF_TOKEN") if token else None
    return keyed


def from_hub(
    profile: Profile,
    *,
    repo: str = "nvidia/Qwen3.6-35B-A3B-NVFP4",
    revision: str | None = "main",
    offline: bool = True,
) -> Profile:
    """The profile served from a hub repository (model.hub, revision, offline)."""
    hub = profile.model_copy(deep=True)
    hub.model.host_path = None
    hub.model.hub, hub.model.revision, hub.model.offline = repo, revision, offline
    return hub
