"""Which flag fills each request field: the one place the CLI's names meet the library's.

The library raises FieldError naming a field of its request (`retention`); a person at a terminal
set it with a flag (`--retention`), so the CLI says that instead. tests/test_field_flags.py holds
every field the library raises to an entry here, and every entry to an option a command has."""

from __future__ import annotations

from ..errors import FieldError

# field -> the flag that sets it. A field filled by different flags on different commands would
# need its command in the key; none is yet, and the test would show it.
FLAG_OF_FIELD: dict[str, str] = {
    # bench, compare --interleave
    "workload": "--workload",
    # rollout
    "all_gpus": "--all-gpus",
    "canary_qualify": "--canary-qualify",
    "max_unavailable": "--max-unavailable",
}


def flag_message(error: FieldError) -> str:
    """The error's message with the flag in front, or the field where no flag sets it (a value
    from a profile or a file, which the message's own words place)."""
    return error.worded(FLAG_OF_FIELD.get(error.field, error.field))
