"""Launch profiles: one YAML file per card-and-model, with `extends:` inheritance.

    schema.py       the fields (pydantic models) and the server command line they make
    secret_refs.py  where a secret lives on the host (env or file) and how its value is read
    store.py        the search path, `extends:` merging, and the file:line of every error
    rules.py        rules across fields (model source, secrets), checked once when a profile loads

Every stage reads profiles, so this package imports only the foundation modules (errors,
resources, yamlio): never a stage's package.
"""

from .schema import (
    ArgValue,
    HealthSpec,
    ImageSpec,
    MatchSpec,
    ModelSpec,
    Profile,
    ProfileSecrets,
    RolloutSpec,
    ServerSpec,
    WatchSpec,
    args_to_argv,
)
from .secret_refs import SecretError, SecretRef
from .store import ProfileStore, deep_merge, load_profile, search_path

__all__ = [
    "ArgValue",
    "HealthSpec",
    "ImageSpec",
    "MatchSpec",
    "ModelSpec",
    "Profile",
    "ProfileSecrets",
    "ProfileStore",
    "RolloutSpec",
    "SecretError",
    "SecretRef",
    "ServerSpec",
    "WatchSpec",
    "args_to_argv",
    "deep_merge",
    "load_profile",
    "search_path",
]
