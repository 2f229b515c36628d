"""The journal as a person reads it: one line per event, `time  action  slot  release  what
happened`. `deploytool journal --json` prints the entries themselves (state.py writes them).

Each kind of event says what happened in its own words; an event this module does not know
(written by a newer deploytool, say) still reads as `field value` pairs, never a dict repr.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..terminal_text import one_line

# Fields every line shows in its own column (or not at all).
_COLUMNS = ("time", "event", "instance", "slot", "release")


def line(entry: dict[str, Any]) -> str:
    """One journal entry as one line: time (UTC), action, slot, release, what happened. A field
    holds what a server, a profile or a log said (an error, a model id): a newline in it, or a
    control character, is shown as its escape, so it can never print as an entry of its own."""
    time = str(entry.get("time", "?")).replace("T", " ").replace("+00:00", "Z")
    slot = entry.get("slot")
    release = entry.get("release")
    return one_line(
        f"{time:<20}  {entry.get('event', '?'):<20} {slot if slot is not None else '-':<10} "
        f"{release if release is not None else '-':>4}  {what(entry)}"
    )


def what(entry: dict[str, Any]) -> str:
    """What happened, in the event's own words."""
    fields = {k: v for k, v in entry.items() if k not in _COLUMNS}
    event = str(entry.get("event", ""))
    parts = event.split(".")
    # the event's own words, else its family's (cache.* , rollout.slot.* -> rollout.*, watch.*)
    say = _SAY.get(event) or next(
        (_SAY[k] for i in range(len(parts) - 1, 0, -1) if (k := ".".join(parts[:i]) + ".*") in _SAY), None
    )
    if say is None:
        return _pairs(fields)
    try:
        return say(fields)
    except (KeyError, TypeError, ValueError):  # an entry from an older or newer deploytool
        return _pairs(fields)


def _pairs(fields: dict[str, Any]) -> str:
    return "; ".join(
        f"{k.replace('_', ' ')} {_value(v)}" for k, v in fields.items() if v not in (None, "", [], {})
    )


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_value(v) for v in value)
    return str(value)


def _but(f: dict[str, Any], *keys: str) -> str:
    """The fields a sentence did not use, as pairs after it (nothing is hidden)."""
    rest = _pairs({k: v for k, v in f.items() if k not in keys})
    return f" ({rest})" if rest else ""


def _up_start(f: dict[str, Any]) -> str:
    text = f"up: profile {f['profile']}, image {f['image']}"
    if f.get("previous") is not None:
        text += f", replacing release {f['previous']}"
    if f.get("skip_qualify"):
        text += ", qualification skipped"
    if f.get("model") and f["model"] != "none":
        text += f", weights {f['model']}"
    return text


def _cutover(f: dict[str, Any]) -> str:
    text = f"serves at {f['url']}"
    if f.get("previous") is not None:
        text += f"; release {f['previous']} stopped, kept as the rollback target"
    return text


def _qualify(f: dict[str, Any]) -> str:
    return f"qualification {'passed' if f['passed'] else 'FAILED'}: {f['summary']} (report {f['report_dir']})"


def _memory(f: dict[str, Any]) -> str:
    text = (
        f"memory plan for {f.get('card', 'the card')}: {f['verdict']}, {f.get('pool_tokens')} KV tokens, "
        f"{f.get('max_running_requests')} running requests, weights {f.get('weights_gib')} GiB"
    )
    if f.get("problems"):
        text += f"; {_value(f['problems'])}"
    return text


def _hook(f: dict[str, Any]) -> str:
    outcome = "timed out" if f.get("timed_out") else f"exited {f.get('exit_code')}"
    return f"{f['hook']} hook {f.get('path')} {outcome} after {f.get('seconds')} s" + _but(
        f, "hook", "path", "exit_code", "timed_out", "seconds"
    )


def _cache(f: dict[str, Any]) -> str:
    text = f"cache volume {f.get('volume')}: {f.get('reason')}"
    if f.get("differences"):
        text += f" ({_value(f['differences'])})"
    if f.get("files_removed"):
        text += f", {f['files_removed']} files removed"
    return text


def _rollout(f: dict[str, Any]) -> str:
    return f"rollout {f.get('rollout')}" + _but(f, "rollout", "options")


def _watch(f: dict[str, Any]) -> str:
    return str(f.get("reason") or "") + _but(f, "reason")


def _drained(f: dict[str, Any]) -> str:
    if f.get("at_start") is None:
        return f"not drained by count: {f['why']}"
    if f["drained"]:
        return f"drained: waited for {f['at_start']} request(s) for {f['waited_s']} s"
    return (
        f"{f['left']} request(s) still running or queued at the drain timeout of {f['timeout_s']:g} s "
        f"(of {f['at_start']}): cut by the stop"
    )


_SAY: dict[str, Callable[[dict[str, Any]], str]] = {
    "up.start": _up_start,
    "rollback.start": lambda f: f"rollback from release {f['current']}",
    "step": lambda f: f"{f['action']}: {f['describe']}" + (" (restoring)" if f.get("restore") else ""),
    "release.stopped": lambda f: f"stopped: {f['reason']}",
    "release.started": lambda f: "started",
    "release.healthy": lambda f: f"healthy after {f['seconds']} s",
    "release.pruned": lambda f: "removed from the engine (beyond --retention)",
    "release.drained": _drained,
    "release.removed": lambda f: "removed from the engine (its compose project and network with it)",
    "stop.start": lambda f: "stop: taking the slot out of service",
    "start.start": lambda f: "start: bringing the slot's release back",
    "down.start": lambda f: "down: removing the slot's releases",
    "slot.stopped": lambda f: "out of service; every release kept",
    "slot.started": lambda f: "serves again",
    "slot.removed": lambda f: (
        "releases removed"
        + (
            f"; volume {f['volume']} and state {f['state']} too"
            if f.get("state")
            else "; cache volume and state kept"
        )
    ),
    "stop.failed": lambda f: f"stop failed: {f['reason']}",
    "start.failed": lambda f: f"start failed: {f['reason']}",
    "down.failed": lambda f: f"down failed: {f['reason']}",
    "qualify": _qualify,
    "qualify.skipped": lambda f: f"qualification skipped ({f['reason']})",
    "cutover": _cutover,
    "rollback": lambda f: f"serves again; release {f['stopped']} stopped",
    "up.failed": lambda f: f"up failed: {f['reason']}",
    "rollback.failed": lambda f: f"rollback failed: {f['reason']}",
    "prune.failed": lambda f: f"prune failed: {f['reason']}",
    "restored": lambda f: f"serves again after release {f['after_failed']} failed",
    "restore.failed": lambda f: f"RESTORING FAILED, nothing serves: {f['reason']}",
    "memory_plan": _memory,
    "memory_plan.skipped": lambda f: f"memory plan overridden ({f['reason']})" + _but(f, "reason", "profile"),
    "hook": _hook,
    "build": lambda f: f"built {f['image']} for profile {f['profile']} (inputs {str(f['inputs_hash'])[:12]})",
    "cache.*": _cache,
    "rollout.*": _rollout,
    "watch.start": lambda f: f"watching {_value(f['slots'])}" + _but(f, "slots"),
    "watch.stop": lambda f: f"stopped after {f['rounds']} rounds, {f['seconds']} s",
    "watch.*": _watch,
}
