"""Whose release a slot's is: this state folder's, or another's.

Two people on one engine with the same DEPLOYTOOL_INSTANCE (the default, unless set) see the same
slots: the engine's labels name the instance, not the person. What tells them apart is the state
folder: every release `up` makes is recorded there (releases/<N>/release.json) before its
container starts, so a release with no record in this folder was started from another one, by
another person's deploytool or by this person's under another DEPLOYTOOL_HOME. Stopping it,
cutting over from it or removing it is taking the slot over, which a command does only when
told so (--take-over); planning refuses otherwise, so `--dry-run` shows the same refusal.
"""

from __future__ import annotations

from ..errors import DeployError
from ..host.labels import instance
from ..host.releases import Release
from .facts import Facts

# what each command would do to the other state folder's release
_WOULD = {
    "up": "stop it and cut over to a release of yours",
    "rollback": "stop it and start your rollback target",
    "rollout": "stop it and cut over to a release of yours",
    "stop": "stop it",
    "start": "start it as your slot's release",
    "down": "remove it",
}


def refuse_taking_over(facts: Facts, releases: list[Release | None], action: str, take_over: bool) -> None:
    """Refuse `action` when any of `releases` was started from another state folder, unless
    `take_over`; the refusal says what to set to work beside it instead."""
    theirs = sorted({r.release for r in releases if r is not None and facts.foreign(r)})
    if not theirs or take_over:
        return
    slot = facts.slot
    which = f"release {theirs[0]}" if len(theirs) == 1 else "releases " + ", ".join(str(n) for n in theirs)
    serving = facts.serving
    state = " (serving)" if len(theirs) == 1 and serving is not None and serving.release == theirs[0] else ""
    folder = facts.state_folder or "this state folder"
    raise DeployError(
        f"{which}{state} of slot {slot.name} was started from another state folder: this one ({folder}, "
        f"DEPLOYTOOL_INSTANCE={instance()}) has no record of it, so another person's deploytool, or yours "
        f"under another DEPLOYTOOL_HOME, runs it; `{action}` would {_WOULD.get(action, 'take it over')}. "
        "Nothing was changed",
        hint="to work beside it, set DEPLOYTOOL_INSTANCE to a name of your own (your own containers, slots and "
        "state on this engine) and publish on another port (--port, DEMO_PORT for `make demo`); if it is "
        "yours, set DEPLOYTOOL_HOME to the state folder that started it; to take the slot over, run the "
        "command again with --take-over",
    )
