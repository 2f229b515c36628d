"""Which flag fills each request field: the one place the CLI's names meet the library's.

The library raises FieldError naming a field of its request (`retention`); a person at a terminal
set it with a flag (`--retention`), so the CLI says that instead. tests/test_field_flags.py holds
every field the library raises to an entry here, and every entry to an option a command has."""

from __future__ import annotations

from ..errors import FieldError

# field -> the flag that sets it. A field filled by different flags on different commands would
# need its command in the key; none is yet, and the test would show it.
FLAG_OF_FIELD: dict[str, str] = {
    # the requests of build, patches import, and k8s (apply, render --k8s)
    "base": "--base",
    "image": "--image",
    "namespace": "--namespace",
    "node_selector": "--node-selector",
    "out": "--out",
    "qualify_image": "--qualify-image",
    "replicas": "--replicas",
    "repo": "--from",
    "retention": "--retention",
    "tolerations": "--toleration",
    "wheelhouse": "--wheelhouse",
    # plan-memory (and tune's --card)
    "card": "--card",
    "patches": "--patches",
    "sets": "--set",
    # up, down and the slot commands
    "profile_name": "--profile",
    "bind": "--bind",
    "drain_timeout": "--drain-timeout",
    "qualify_limit": "--limit",
    "limit": "--limit",
    "since": "--since",
    "tail": "--tail",
    "api_key": "--api-key",
    # the slot a command acts on, and plan-memory's card
    "gpus": "--gpu",
    "cpu_slot": "--cpu-slot",
    # qualify and bench's target
    "url": "--url",
    "against": "--against",
    # monitor up
    "port": "--port",
    "cards_exporter": "--cards-exporter",
    # bench, compare --interleave
    "workload": "--workload",
    # rollout
    "all_gpus": "--all-gpus",
    "canary_qualify": "--canary-qualify",
    "max_unavailable": "--max-unavailable",
    # tune
    "budget": "--budget",
    "local": "--local",
    "port_range": "--port-range",
    "resume": "--resume",
    "slo": "--slo",
}


def flag_message(error: FieldError) -> str:
    """The error's message with the flag in front, or the field where no flag sets it (a value
    from a profile or a file, which the message's own words place)."""
    return error.worded(FLAG_OF_FIELD.get(error.field, error.field))
