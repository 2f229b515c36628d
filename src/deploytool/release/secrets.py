"""Secrets of a release: the hub token and the server's API key, never written inline.

A profile names where a secret lives on the host, never its value:

    secrets:
      hf_token: {env: HF_TOKEN}            # or {file: /etc/deploytool/hf-token}
    server:
      api_key: {file: /etc/deploytool/api-key}

`plan_secrets` (pure) turns that into compose `secrets` of the release; `resolve_values`
reads the values on the host just before `docker compose up`, which receives them in its own
environment only (`DEPLOYTOOL_SECRET_*`). Compose copies each into the container at
/run/secrets/<name> (the `environment:` source of compose secrets), so the value is in no
deploytool file, no compose.yaml, no label, no `docker inspect` and no journal.

How SGLang 0.5.23 takes the key (checked in its source): there is no environment variable for
`--api-key` (sglang/srt/environ.py has none; the field is `api_key` in
sglang/srt/arg_groups/fields/serving.py), but `--config FILE.yaml` merges a YAML file of
options into the command line (sglang/srt/server_args.py prepare_server_args ->
sglang/srt/utils/server_args_config_parser.py ConfigArgumentMerger). So the container gets
`--config /run/secrets/deploytool-sglang-config.yaml` and the key is in that file, not in the
container's command line (`docker inspect`, `ps`). Caveat, also from the source: SGLang's
/server_info returns `resolved_dict()` (api_key included) and `launch_command` (the merged
command line, only watermark keys redacted: sampling/watermarking/core.py), both behind the
key itself (utils/auth.py: NORMAL auth level). deploytool redacts them (`deploytool.redaction.redact`) before any
report keeps a server's self-description.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import FieldError
from ..profiles import SecretRef
from ..redaction import REDACTED, hold, redact  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from ..profiles import Profile

SECRETS_DIR = "/run/secrets"
SGLANG_CONFIG_TARGET = f"{SECRETS_DIR}/deploytool-sglang-config.yaml"  # SGLang wants a .yaml suffix
AUTH_HEADER_TARGET = f"{SECRETS_DIR}/deploytool-auth-header"
HF_TOKEN_TARGET = f"{SECRETS_DIR}/hf_token"
ENV_PREFIX = "DEPLOYTOOL_SECRET_"
# qualify/bench against --url: the key from this variable or --api-key-file, never a flag value.
API_KEY_ENV = "DEPLOYTOOL_API_KEY"
# Paths SGLang serves without a key even when one is set (utils/auth.py decide_request_auth).
OPEN_PATH_PREFIXES = ("/health", "/ready", "/metrics")


@dataclass(frozen=True)
class ReleaseSecret:
    """One compose secret of a release: where its value comes from and where it lands."""

    name: str  # compose secret name
    ref: SecretRef
    target: str  # in the container
    purpose: str
    form: str  # "raw", "sglang-config" or "auth-header": how the value is wrapped

    @property
    def env_var(self) -> str:
        """The variable of `docker compose up`'s own environment that carries the value."""
        return ENV_PREFIX + self.name.upper().replace("-", "_")

    def content(self, value: str) -> str:
        if self.form == "sglang-config":
            # JSON is YAML: SGLang's yaml.safe_load reads it, and so does the simulator, whose
            # image has no PyYAML. Quoting is JSON's, so any character of the key survives.
            return json.dumps({"api-key": value}) + "\n"
        if self.form == "auth-header":
            return f"Authorization: Bearer {value}\n"
        return value

    def describe(self) -> str:
        return f"{self.name}: {self.ref.describe()} -> {self.target} ({self.purpose})"


def plan_secrets(profile: Profile) -> list[ReleaseSecret]:
    """The compose secrets a release of `profile` gets (pure: no value is read)."""
    planned: list[ReleaseSecret] = []
    token = profile.secrets.hf_token
    if token is not None:
        planned.append(
            ReleaseSecret("hf_token", token, HF_TOKEN_TARGET, "hub token, read through HF_TOKEN_PATH", "raw")
        )
    key = profile.server.api_key
    if key is not None:
        planned.append(
            ReleaseSecret(
                "sglang_config",
                key,
                SGLANG_CONFIG_TARGET,
                "the server's API key, read through --config",
                "sglang-config",
            )
        )
        planned.append(
            ReleaseSecret(
                "auth_header",
                key,
                AUTH_HEADER_TARGET,
                "Authorization header for the container's health check",
                "auth-header",
            )
        )
    return planned


def container_env(planned: list[ReleaseSecret]) -> dict[str, str]:
    """Environment entries that point at secret files (paths only, never values)."""
    # plan_secrets plans the hub token at most once
    token = next((s for s in planned if s.name == "hf_token"), None)
    return {"HF_TOKEN_PATH": token.target} if token else {}


def launch_args(planned: list[ReleaseSecret]) -> list[str]:
    return ["--config", SGLANG_CONFIG_TARGET] if any(s.form == "sglang-config" for s in planned) else []


def health_header_args(planned: list[ReleaseSecret]) -> list[str]:
    """curl reads the header from the secret file (`-H @file`), so the key is not in the test."""
    return ["-H", f"@{AUTH_HEADER_TARGET}"] if any(s.form == "auth-header" for s in planned) else []


def compose_secrets(planned: list[ReleaseSecret]) -> tuple[list[dict[str, str]], dict[str, dict[str, str]]]:
    """(the service's `secrets:` list, the document's top-level `secrets:` mapping)."""
    service = [{"source": s.name, "target": s.target} for s in planned]
    top = {s.name: {"environment": s.env_var} for s in planned}
    return service, top


def resolve_values(planned: list[ReleaseSecret], env: dict[str, str] | None = None) -> dict[str, str]:
    """{DEPLOYTOOL_SECRET_X: content} for `docker compose up`'s environment. Raises SecretError,
    naming the variable or file, when one cannot be read: up calls this before anything is stopped."""
    return {s.env_var: s.content(s.ref.resolve(env, what=f"secret {s.name} ({s.purpose})")) for s in planned}


# -- API key for clients -------------------------------------------------------------------------
def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def client_api_key(
    *,
    key_file: Path | None = None,
    given_on_command_line: str | None = None,
    env: dict[str, str] | None = None,
) -> str | None:
    """The key for qualify/bench against an endpoint: --api-key-file, else DEPLOYTOOL_API_KEY.
    A key typed on the command line is refused: it lands in `ps` and the shell's history."""
    source: Mapping[str, str] = os.environ if env is None else env
    if given_on_command_line is not None:
        raise FieldError(
            "api_key",
            "is refused: a key on the command line shows in `ps` and the shell history",
            value="VALUE",
            hint=f"put it in a file (mode 0600) and pass --api-key-file PATH, or export {API_KEY_ENV}",
        )
    if key_file is not None:
        # read, never copied into a container: the shape rules hold, the owner's not (in a
        # Kubernetes qualify Job the key is a Secret's file, root's and readable by the pod's group)
        return SecretRef(file=str(key_file)).resolve(source, what="--api-key-file", private=False)
    value = source.get(API_KEY_ENV, "").strip()
    hold(value)
    return value or None


def release_api_key(record: dict[str, Any], env: dict[str, str] | None = None) -> str | None:
    """The key of a release, from the reference its release record keeps (release.json `api_key`)."""
    reference = record.get("api_key")
    if not reference:
        return None
    return SecretRef.model_validate(reference).resolve(
        env, what=f"the API key of release {record.get('release', '?')}"
    )


def is_open_path(path: str) -> bool:
    return path.startswith(OPEN_PATH_PREFIXES)


# redact and REDACTED live in the foundation (deploytool.redaction), so that every layer's
# output scrubs what it holds; they are imported above for the code that finds them here.


def describe_for_render(planned: list[ReleaseSecret]) -> list[str]:
    """Comment lines for `render`: where each secret comes from and where it goes."""
    return [f"secret {s.describe()}; compose reads it from ${s.env_var} at `up`" for s in planned]


def record(profile: Profile, planned: list[ReleaseSecret]) -> dict[str, Any]:
    """What the release record keeps about secrets (`planned`: plan_secrets(profile)): references only."""
    key = profile.server.api_key
    return {
        "api_key": key.reference() if key else None,
        "secrets": {s.name: s.ref.reference() for s in planned},
    }
