"""What a release needs from the host besides its image: the weights (checked, identified) and
its secrets (read). `up` calls `prepare` while it gathers its facts (deploy/facts.py), once
for every reader of the weights (the memory gate reads the snapshot this check found), so a
missing checkpoint or an unset token is refused by the plan (deploy/plan.py) with nothing
changed on the slot. The facts keep no secret value: the executor's Start step reads the values
again just before `docker compose up`.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..profiles import HealthSpec, SecretError
from . import secrets, weights
from .state import release_path

if TYPE_CHECKING:
    from ..profiles import Profile

LOOPBACK_NAMES = {"localhost"}


@dataclass
class ReleaseInputs:
    model: weights.ModelPlan
    secrets: list[secrets.ReleaseSecret]
    # Values: for `docker compose up`'s environment and the clients' Authorization header only.
    # Never journal, print or serialise these two fields.
    secret_env: dict[str, str] = field(repr=False, default_factory=dict)
    api_key: str | None = field(repr=False, default=None)
    warnings: list[str] = field(default_factory=list)

    def record(self, profile: Profile, bind: str) -> dict[str, Any]:
        """For release.json: what the release serves and where its secrets come from."""
        return {"model": self.model.record(), "bind": bind, **secrets.record(profile, self.secrets)}


def beyond_loopback(bind: str) -> bool:
    if bind in LOOPBACK_NAMES:
        return False
    try:
        return not ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return True  # a host name: assume it is reachable from elsewhere


def prepare(profile: Profile, *, bind: str, env: dict[str, str] | None = None) -> ReleaseInputs:
    """Check the weights and read the secrets; raises ModelMissing or SecretError (both usage
    errors that name the path or variable and what to do)."""
    model = weights.check_model(weights.plan_model(profile, env))
    planned = secrets.plan_secrets(profile)
    secret_env = secrets.resolve_values(planned, env)
    key = profile.server.api_key.resolve(env, what="server.api_key") if profile.server.api_key else None
    warnings = []
    if beyond_loopback(bind) and key is None:
        warnings.append(
            f"publishing on {bind} without an API key: anyone who reaches this host can call the "
            "server; set server.api_key: {env: NAME} or {file: PATH} in the profile"
        )
    warnings += weights.unreadable_by_the_server(model, frozenset(profile.server.cap_add))
    if model.kind == "hub" and model.commit is None:
        warnings.append(
            f"model {model.repo} is not in the hub cache {model.host_path}: the server will download "
            "it at start (model.offline: false)"
        )
    return ReleaseInputs(model=model, secrets=planned, secret_env=secret_env, api_key=key, warnings=warnings)


def read_record(slot: str, number: int) -> dict[str, Any]:
    try:
        return json.loads((release_path(slot, number) / "release.json").read_text())
    except (OSError, ValueError):
        return {}


def release_health(slot: str, number: int) -> HealthSpec:
    """A release's health budget from its record: a restore needs no profile search path."""
    try:
        return HealthSpec.model_validate(read_record(slot, number)["health"])
    except (ValueError, KeyError):
        return HealthSpec()  # SGLang's generous defaults: a slow start is better than a false failure


def release_api_key(slot: str, number: int, env: dict[str, str] | None = None) -> str | None:
    """The API key of a release, read again from where its record says it lives (raises
    SecretError when the record names a key that cannot be read now)."""
    record = read_record(slot, number)
    record.setdefault("release", number)
    return secrets.release_api_key(record, env)


def health_headers(slot: str, number: int, path: str) -> dict[str, str]:
    """Headers for deploytool's own health probe of a release. SGLang serves /health without a
    key (utils/auth.py), so the key is read only for another health path."""
    if secrets.is_open_path(path):
        return {}
    try:
        return secrets.auth_headers(release_api_key(slot, number))
    except SecretError:
        return {}  # the probe then fails with the server's 401, which the log tail shows


def hold_release_secrets(slot: str, number: int, env: dict[str, str] | None = None) -> None:
    """Read the values of a release's secrets (its API key, its hub token) from where its record
    says they live, only so that every output of this process scrubs them: a server may print
    its own command line, key included, into the log that `logs` prints or `tune` keeps. A value
    that cannot be read here (a variable this shell lacks) is passed over: nothing to hold."""
    record = read_record(slot, number)
    references = [record.get("api_key"), *(record.get("secrets") or {}).values()]
    for reference in references:
        if not reference:
            continue
        try:
            secrets.SecretRef.model_validate(reference).resolve(env, what=f"a secret of release {number}")
        except (SecretError, ValueError):
            continue
