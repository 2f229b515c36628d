"""A rollout read back from the journal: what --resume continues and --undo takes back.

The journal keeps each rollout's request (`rollout.start`) and every slot's turn; from those and
the slots' pointers this says which slots the last rollout upgraded that still serve its
release, and what an undo would do to each, changing nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..host.slots import slot_named
from ..release.state import read_journal, read_pointers
from .rollout_plan import RolloutRequest


def upgraded_by(rollout_id: str) -> dict[str, int]:
    """slot -> the release the rollout cut over on it (its `rollout.slot.done` lines)."""
    return {
        e["slot"]: e["release"]
        for e in read_journal()
        if e.get("rollout") == rollout_id and e["event"] == "rollout.slot.done"
    }


@dataclass
class JournaledRollout:
    id: str
    options: RolloutRequest
    done: list[str]  # slots upgraded that still serve the rollout's release
    finished: str | None  # rollout.done / rollout.undone when it ended that way


def last_rollout() -> JournaledRollout:
    entries = [e for e in read_journal() if e["event"].startswith("rollout.") and e.get("rollout")]
    starts = [e for e in entries if e["event"] == "rollout.start"]
    if not starts:
        raise UsageError("no rollout in the journal to resume or undo")
    rid = starts[-1]["rollout"]
    mine = [e for e in entries if e["rollout"] == rid]
    raw = starts[-1]["options"]
    options = RolloutRequest(
        profile_name=raw["profile"],
        slots=tuple(slot_named(s["name"], s["gpus"]) for s in raw["slots"]),
        max_unavailable=raw["max_unavailable"],
        canary_qualify=raw["canary_qualify"],
        undo_on_failure=raw["undo_on_failure"],
        qualify_limit=raw["qualify_limit"],
        retention=raw["retention"],
        drain_timeout=raw.get("drain_timeout"),
        take_over=bool(raw.get("take_over")),
        profiles_dirs=tuple(Path(p) for p in raw["profiles_dirs"]) or None,
    )
    made: dict[str, int] = {}
    for e in mine:
        if e["event"] == "rollout.slot.done":
            made[e["slot"]] = e["release"]
        elif e["event"] == "rollout.slot.undone":
            made.pop(e["slot"], None)
    done = [s.name for s in options.slots if s.name in made and read_pointers(s.name).current == made[s.name]]
    ends = [e["event"] for e in mine if e["event"] in ("rollout.done", "rollout.undone")]
    return JournaledRollout(id=rid, options=options, done=done, finished=ends[-1] if ends else None)


def undo_plan() -> dict[str, Any]:
    """What `rollout --undo` would do, from the journal and the slots' pointers, changing
    nothing: each slot the last rollout upgraded, last first, rolled back from the rollout's
    release to its rollback target, or left alone (and why)."""
    last = last_rollout()
    made = upgraded_by(last.id)
    steps: list[dict[str, Any]] = []
    for slot in reversed(last.options.slots):
        pointers = read_pointers(slot.name)
        ours = made.get(slot.name)
        if last.finished == "rollout.undone" or ours is None:
            why = "already undone" if last.finished == "rollout.undone" else "not upgraded by this rollout"
            steps.append({"slot": slot.name, "action": "none", "from": None, "to": None, "why": why})
        elif pointers.current != ours:
            steps.append(
                {
                    "slot": slot.name,
                    "action": "left alone",
                    "from": None,
                    "to": None,
                    "why": f"serves release {pointers.current}, not this rollout's {ours}",
                }
            )
        else:
            steps.append(
                {
                    "slot": slot.name,
                    "action": "roll back",
                    "from": ours,
                    "to": pointers.previous,
                    "why": None if pointers.previous else "no rollback target: the rollback would refuse",
                }
            )
    return {"id": last.id, "profile": last.options.profile_name, "finished": last.finished, "slots": steps}


def undo_lines(plan: dict[str, Any]) -> list[str]:
    out = [f"rollout {plan['id']} ({plan['profile']}) --undo would, last slot first:"]
    for s in plan["slots"]:
        if s["action"] == "roll back":
            out.append(
                f"  slot {s['slot']}: roll back from release {s['from']} to release {s['to']}"
                + (f" ({s['why']})" if s["why"] else "")
            )
        else:
            out.append(f"  slot {s['slot']}: {s['action']}: {s['why']}")
    return out
