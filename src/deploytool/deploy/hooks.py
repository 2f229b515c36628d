"""Gateway hooks, as Kamal's: executables in a hooks folder, run at fixed points of a deploy.

    pre-stop       before a serving release is stopped (drain it from the gateway); a non-zero
                   exit, or running past its time limit, aborts before anything is stopped
    post-cutover   after a new release took over the slot (put it back in the gateway)
    post-rollback  after a rollback, or a restore after a failure, brought a release back
    on-failure     when an up, a rollback or a rollout step failed, or `watch` rolled back

The folder is `--hooks DIR`, else $DEPLOYTOOL_HOOKS, else the user's own
($XDG_CONFIG_HOME/deploytool/hooks, ~/.config/deploytool/hooks) when it exists; with none of
them, no hook runs. A folder or a hook owned by another user than the deploying one (or root),
or that its group or others may write, is refused, and so is a link that leads nowhere or
through such a folder or link (followed link by link) to such a file: whoever can change it
could run code as the deploying user. Each hook is checked again right before it runs; one
that no longer passes is not run and counts as failed. A hook gets the slot, release, URL and
profile in environment variables (docs/hooks.md lists them) and the host's basics (PATH, HOME,
locale: HOST_ENV), nothing else of deploytool's environment: no hub token, no API key, no
DEPLOYTOOL_SECRET_*. Its stdout and stderr go to deploytool's stderr. Each run is journaled (event `hook`) with
its exit code and duration; its output is not journaled (it may hold secrets). Each run has
a time limit ($DEPLOYTOOL_HOOK_TIMEOUT seconds, default 60): past it, the hook and what it
started are killed and the run counts as failed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import DeployError, DeploytoolError, UsageError
from ..files import resolve_links, untrusted
from ..release.state import journal
from ..resources import user_config_dir
from .reporter import Reporter
from .steps import CutOver, Plan, Step, Stop

HOOK_NAMES = ("pre-stop", "post-cutover", "post-rollback", "on-failure")
DEFAULT_HOOK_TIMEOUT_S = 60.0
HOOKS_ENV = "DEPLOYTOOL_HOOKS"
TIMEOUT_ENV = "DEPLOYTOOL_HOOK_TIMEOUT"
# What a hook gets of deploytool's own environment: what a script needs to find its programs,
# its home and its locale. Everything else (HF_TOKEN, DEPLOYTOOL_API_KEY, a gateway's variables)
# stays with deploytool; a hook that needs a credential reads its own file.
HOST_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


class HookFailed(DeployError):
    pass


@dataclass
class HookRun:
    hook: str
    path: str
    exit_code: int | None  # None when it ran past its time limit and was killed
    seconds: float
    timed_out: bool = False
    refused: str | None = None  # why it was not run: it no longer passed the check when its time came

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Hooks:
    """Called at step boundaries; the default does nothing. An exception from `before_step`
    fails that step before it ran, so a `pre-stop` hook can abort before anything stops."""

    def before_step(self, plan: Plan, step: Step) -> None:
        pass

    def after_step(self, plan: Plan, step: Step) -> None:
        pass

    def on_failure(self, plan: Plan, error: DeploytoolError) -> None:
        pass

    def after_restore(self, plan: Plan, release: int, url: str | None) -> None:
        pass

    def event(
        self,
        name: str,
        *,
        slot: str,
        release: int | None,
        url: str | None,
        profile: str | None,
        **extra: object,
    ) -> HookRun | None:
        """Run one hook outside a plan's steps (`watch`, a rollout); None when there is none."""
        return None


def hook_timeout() -> float:
    """Each hook's time limit: $DEPLOYTOOL_HOOK_TIMEOUT seconds, else 60."""
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_HOOK_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1
    if value <= 0:
        raise UsageError(f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds")
    return value


def hooks_folder(directory: Path | None) -> Path | None:
    """--hooks DIR, else $DEPLOYTOOL_HOOKS, else the user's hooks folder when there is one,
    checked before anything runs."""
    if directory is None and os.environ.get(HOOKS_ENV):
        directory = Path(os.environ[HOOKS_ENV])
    if directory is None:
        user = user_config_dir("hooks")
        if not user.is_dir():
            return None
        directory = user
    if not directory.is_dir():
        raise UsageError(
            f"hooks folder {directory} does not exist",
            hint=f"give an existing folder with --hooks DIR or {HOOKS_ENV}",
        )
    for path, what in ((directory, "hooks folder"), *((directory / name, "hook") for name in HOOK_NAMES)):
        if (fault := hook_fault(path, what)) is not None:
            raise fault
    return directory


def hook_fault(path: Path, what: str = "hook") -> UsageError | None:
    """Why the hooks folder or a hook in it may not run, or None (also None for a hook that is not
    there: a name that is a link counts as there, even when it leads nowhere)."""
    if what == "hook" and not os.path.lexists(path):
        return None
    fault = untrusted(path)
    if fault is not None:
        target = resolve_links(path).target
        if fault.path == Path(os.path.abspath(path)):
            where = f"{what} {path}"
        elif fault.path == target:
            where = f"{what} {path} is a link to {target}, which"
        else:
            where = f"{what} {path}: {fault.path}, on its way (link by link) to {target},"
        return UsageError(
            f"{where} {fault.reason}; a hook runs as you, so whoever can change it could run code as you",
            hint=f"{fault.fix}, or keep the hooks in a folder of your own",
        )
    if what == "hook" and not os.access(path, os.X_OK):
        return UsageError(f"hook {path} is not executable", hint=f"chmod +x {path}")
    return None


def hook_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The host's basics of `base` (default: this process's environment), nothing else."""
    source: Mapping[str, str] = os.environ if base is None else base
    return {k: source[k] for k in HOST_ENV if k in source}


class GatewayHooks(Hooks):
    """The hooks of one folder. `context` adds variables to every run (a rollout's id)."""

    def __init__(
        self,
        directory: Path | None,
        *,
        timeout_s: float | None = None,
        reporter: Reporter | None = None,
        context: dict[str, str] | None = None,
    ):
        self.directory = hooks_folder(directory)
        self.timeout_s = timeout_s if timeout_s is not None else hook_timeout()
        self.reporter = reporter
        self.context = dict(context or {})
        self.runs: list[HookRun] = []

    def before_step(self, plan: Plan, step: Step) -> None:
        if not isinstance(step, Stop) or plan.action not in ("up", "rollback", "stop", "down"):
            return
        run = self.event(
            "pre-stop",
            slot=plan.slot,
            release=step.release,
            url=step.url or plan.url,
            profile=plan.profile,
            action=plan.action,
            next_release=plan.release,
        )
        if run is not None and not run.ok:
            why = (
                f"was refused: {run.refused}"
                if run.refused
                else f"ran past its time limit of {self.timeout_s:g} s"
                if run.timed_out
                else f"exited with status {run.exit_code}"
            )
            raise HookFailed(
                f"pre-stop hook {run.path} {why}: release {step.release} of slot {plan.slot} "
                "was not stopped and still serves",
                hint="the hook drains the release from your gateway; fix it and run again",
            )

    def after_step(self, plan: Plan, step: Step) -> None:
        if isinstance(step, CutOver):
            name = "post-cutover" if step.event == "cutover" else "post-rollback"
            self.event(
                name,
                slot=plan.slot,
                release=step.release,
                url=plan.url,
                profile=plan.profile,
                action=plan.action,
                previous_release=step.previous,
            )

    def on_failure(self, plan: Plan, error: DeploytoolError) -> None:
        self.event(
            "on-failure",
            slot=plan.slot,
            release=plan.release,
            url=plan.url,
            profile=plan.profile,
            action=plan.action,
            error=error.message.splitlines()[0],
        )

    def after_restore(self, plan: Plan, release: int, url: str | None) -> None:
        self.event(
            "post-rollback",
            slot=plan.slot,
            release=release,
            url=url,
            profile=plan.profile,
            action=f"{plan.action}-restore",
            previous_release=plan.release,
        )

    def event(
        self,
        name: str,
        *,
        slot: str,
        release: int | None,
        url: str | None,
        profile: str | None,
        **extra: object,
    ) -> HookRun | None:
        if self.directory is None or not os.path.lexists(self.directory / name):
            return None
        env = {
            **hook_env(),
            **self.context,
            "DEPLOYTOOL_HOOK": name,
            "DEPLOYTOOL_SLOT": slot,
            "DEPLOYTOOL_RELEASE": "" if release is None else str(release),
            "DEPLOYTOOL_URL": url or "",
            "DEPLOYTOOL_PROFILE": profile or "",
        }
        env.update({f"DEPLOYTOOL_{k.upper()}": "" if v is None else str(v) for k, v in extra.items()})
        # Checked again right before it runs: what was fine when the deploy began (or not there yet)
        # may have changed since. A pass means no one but this user and root can change the folders,
        # links and file it runs through, so nothing another user does can slip in between this
        # check and the exec; running the path (not an fd) keeps $0 the hook's own name.
        fault = hook_fault(self.directory, "hooks folder") or hook_fault(self.directory / name)
        if fault is not None:
            why = f"{fault.message} ({fault.hint})"
            run = HookRun(
                hook=name, path=str(self.directory / name), exit_code=None, seconds=0.0, refused=why
            )
        else:
            run = run_hook(self.directory / name, env, self.timeout_s)
        self.runs.append(run)
        journal(
            "hook",
            hook=name,
            slot=slot,
            release=release,
            path=run.path,
            exit_code=run.exit_code,
            seconds=run.seconds,
            timed_out=run.timed_out,
            **({"refused": run.refused} if run.refused else {}),
            **{k: v for k, v in extra.items() if k != "error"},
        )
        if not run.ok and self.reporter is not None:
            self.reporter.warn(
                f"hook {name} "
                + (
                    f"not run: {run.refused}"
                    if run.refused
                    else "ran past its time limit"
                    if run.timed_out
                    else f"exited {run.exit_code}"
                )
            )
        return run


def run_hook(path: Path, env: dict[str, str], timeout_s: float) -> HookRun:
    """Run one hook in its own process group, so a time-out kills what it started too."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(path)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        code: int | None = proc.returncode
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        code, timed_out = None, True
    if output:  # the hook's own words, on deploytool's stderr (never in the journal)
        sys.stderr.write(output.decode(errors="replace"))
    return HookRun(
        hook=path.name,
        path=str(path),
        exit_code=code,
        seconds=round(time.monotonic() - started, 2),
        timed_out=timed_out,
    )
