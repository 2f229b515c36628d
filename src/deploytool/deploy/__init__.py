"""Deploy: `up`, `rollback`, `prune` and `status` of a slot's releases."""

from .executor import *  # noqa: F401,F403
from .executor import (DEFAULT_RETENTION, HealthFailure, Reporter, RollbackResult, SlotStatus, UpResult,  # noqa: F401
                       prune, release_health, rollback, status, up, write_release_record)
