"""Launch profiles: one YAML file per card-and-model, with `extends:` inheritance.

    schema.py  the profile's fields, the loader and its merge rule (split in the next commits)
"""

from .schema import (ArgValue, HealthSpec, ImageSpec, MatchSpec, ModelSpec, Profile, RolloutSpec, ServerSpec,
                     WatchSpec, args_to_argv, deep_merge, load_profile, search_path, ProfileStore)

__all__ = ["ArgValue", "HealthSpec", "ImageSpec", "MatchSpec", "ModelSpec", "Profile", "ProfileStore", "RolloutSpec",
           "ServerSpec", "WatchSpec", "args_to_argv", "deep_merge", "load_profile", "search_path"]
