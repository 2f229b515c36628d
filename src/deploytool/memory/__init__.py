"""Memory first: predict SGLang's pools before a start (plan), and put a decode speed next to
the card's memory-bandwidth limit (roofline)."""

from .cards import Card, card_from_gpu, card_from_table
from .checkpoint import ModelShape, read_checkpoint, shape_from_config
from .plan import MemoryPlan, PlanInputs, plan_memory
from .profile_plan import check_memory_fit, checkpoint_folder, plan_for_profile, resolve_card
from .what_if import parse_sets

__all__ = [
    "Card",
    "MemoryPlan",
    "ModelShape",
    "PlanInputs",
    "card_from_gpu",
    "card_from_table",
    "check_memory_fit",
    "checkpoint_folder",
    "parse_sets",
    "plan_for_profile",
    "plan_memory",
    "read_checkpoint",
    "resolve_card",
    "shape_from_config",
]
