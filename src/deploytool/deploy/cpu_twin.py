"""A GPU release's CPU twin: what of a release for cards can be started on a machine without one.

A compose document that reserves a GPU cannot start here; `up` plans it and `docker compose
config` checks it. Its twin is that same document (the plan `up` would write, built from the
same facts and checks) with what needs a card taken out, started by `docker compose up` on the
real engine:

  * no GPU reservation, no published port, restart "no", no health check (nothing serves);
  * the slot's JIT cache volume replaced by a tmpfs (the slot's volume is never touched);
  * labels that mark it a twin, not a release, so `status`, `rollback` and `prune` never see it;
  * the entrypoint deploytool's twin probe (image/in_image/twin_probe.py), which takes the
    release's command as its arguments, unchanged.

What runs is the release's image, its command line, its environment and its mounts (the
weights read-only): sglang's own parser in that image (a fork's parser, for a fork) parses
the command exactly as `python -m sglang.launch_server` does first, and the probe reports
what it stored for each flag, whether the weights' config.json is where the runtime looks,
and where sglang's own argument resolution stops on this CPU. The twin is then removed.
Loading the weights, the kernels, /health and qualification need the card.
"""

from __future__ import annotations

import copy
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import DeployError, FieldError, UsageError
from ..host import labels
from ..host.engine import Engine
from ..host.slots import Slot
from ..image.flagcheck import marked_answer
from ..release import secrets
from ..resources import package_dir
from ..yamlio import dump_yaml
from .commands import plan_for_up
from .steps import Start
from .up_checks import UpOptions

_MARKER = "---deploytool-cpu-twin---"


@dataclass
class TwinResult:
    slot: str
    release: int
    release_project: str  # what `up` would start
    project: str  # the twin's compose project (removed when it ends)
    image: str
    command: list[str]  # the release's, as the twin ran it
    changes: list[str]  # how the twin's document differs from the release's
    exit_code: int
    report: dict[str, Any] | None  # the probe's answer (None when sglang refused the command)
    stderr_tail: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the release's plan's
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            self.exit_code == 0
            and self.report is not None
            and "error" not in self.report
            and not (self.report.get("model_config") or {}).get("refused")
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}

    def lines(self) -> list[str]:
        out = [
            f"CPU twin of release {self.release} of slot {self.slot} ({self.release_project}), image {self.image}"
        ]
        out += [f"  warning: {w}" for w in self.warnings]
        out += ["  changed from the release's compose document:"] + [f"    - {c}" for c in self.changes]
        out.append(
            f"  ran the release's command ({len(self.command)} arguments): {' '.join(self.command[:3])} ..."
        )
        report = self.report or {}
        if self.exit_code != 0 or self.report is None or "error" in report:
            # argparse's usage runs to a hundred lines; its verdict is the line that says error
            said = [x for x in self.stderr_tail if "error" in x.lower()] or self.stderr_tail[-3:]
            out.append(f"  refused by the image's sglang: exit {self.exit_code}")
            out += [f"    {x}" for x in ([report["error"]] if report.get("error") else said)]
            return out
        out.append(f"  sglang {report['sglang']} ({report['sglang_module']}) parsed it (exit 0); stored:")
        out += [f"    {flag} = {value!r}" for flag, value in report["server_args"].items()]
        model = report["model"]
        if model["found"]:
            out.append(
                f"  weights: {model['config']} is there through the release's mounts "
                f"({model.get('model_type')}, {', '.join(model.get('architectures') or [])})"
            )
        else:
            out.append(f"  weights: {model['config']} is NOT there: the release would not find its model")
        config = report.get("model_config") or {}
        if config.get("refused"):
            out.append(f"  SGLang's model configuration REFUSES the launch: {config['refused']}")
        elif config.get("ok"):
            out.append(f"  SGLang's model configuration: built (context length {config.get('context_len')})")
        elif config.get("note"):
            out.append(f"  SGLang's model configuration: not built ({config['note']})")
        resolution = report["resolution"]
        out.append(
            "  sglang's argument resolution: "
            + ("completed" if resolution["ok"] else f"stopped at {resolution['stopped_at']}")
        )
        out.append(
            f"  the twin ({self.project}) was removed after {self.seconds} s; loading the weights, the kernels, "
            "/health and qualification need the card"
        )
        return out


def twin_document(
    document: dict[str, Any], *, project: str, image: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """(the twin's compose document, how it differs from the release's)."""
    release_project = document["name"]
    twin = copy.deepcopy(document)
    twin["name"] = project
    server = twin["services"]["server"]
    command = server["command"]
    changes = []
    deploy = server.get("deploy", {})
    devices = deploy.get("resources", {}).get("reservations", {}).pop("devices", [])
    if devices:
        cards = ", ".join(i for d in devices for i in d.get("device_ids", []))
        changes.append(f"no GPU reservation (the release reserves {cards})")
    # only the card goes: anything else under deploy (a memory limit) stays as the release has it
    if not deploy.get("resources", {}).get("reservations"):
        deploy.get("resources", {}).pop("reservations", None)
    if not deploy.get("resources"):
        deploy.pop("resources", None)
    if not deploy:
        server.pop("deploy", None)
    probe = (package_dir() / "image" / "in_image" / "twin_probe.py").read_text()
    # compose reads `$` in values as interpolation: `$$` is a literal one
    server["entrypoint"] = [command[0], "-c", probe.replace("$", "$$")]
    changes.append(
        "entrypoint: deploytool's twin probe, given the release's command unchanged: sglang's own "
        "prepare_server_args() parses it, as `python -m sglang.launch_server` does first"
    )
    if image and image != server["image"]:
        changes.append(f"image {image} instead of {server['image']}")
        server["image"] = image
    mounts = server.get("volumes", [])
    cache = [i for i, mount in enumerate(mounts) if mount.get("type") == "volume"]
    for i in cache:
        mounts[i] = {"type": "tmpfs", "target": mounts[i]["target"]}
    if cache:
        volumes = twin.pop("volumes", {})
        changes.append(
            f"the slot's JIT cache volume {', '.join(v.get('name', k) for k, v in volumes.items())} "
            "is not mounted: a tmpfs instead (the slot's volume is never touched)"
        )
    if server.pop("ports", None):
        changes.append("no published port (nothing serves)")
    server["restart"] = "no"
    server["healthcheck"] = {"disable": True}
    changes.append("restart: no; health check off")
    server["container_name"] = f"{project}-server"
    server["labels"] = {labels.INSTANCE: labels.instance(), labels.CPU_TWIN: release_project}
    if "networks" in twin:  # its network is the twin's too, never a release's
        twin["networks"] = {"default": {"labels": dict(server["labels"])}}
    changes.append(
        f"labels: {labels.CPU_TWIN}={release_project} instead of a release's ({labels.MANAGED} and the "
        "rest): `status`, `rollback` and `prune` never see it"
    )
    return twin, changes


def run_cpu_twin(
    slot: Slot,
    options: UpOptions,
    *,
    engine: Engine | None = None,
    image: str | None = None,
    timeout: float = 300,
) -> TwinResult:
    """Plan the release as `up` would (every check before stopping), then start its twin on this
    engine, wait for it to end, read its answer and remove it. Nothing of the slot changes: no
    release number, no file in the state directory, no journal line, no cache volume."""
    if slot.is_cpu:
        raise UsageError(
            "the CPU slot's releases start as they are: use `deploytool up --cpu`",
            hint="cpu-twin takes a GPU slot (--gpu UUID) and starts what of its release runs without a card",
        )
    engine = engine or Engine()
    started = time.monotonic()
    # every check `up` makes but the port's: the twin publishes none, so a server on the
    # release's port (the demo's, a person's own) takes nothing from it; nor whose release
    # serves the slot: the twin stops nothing of it. Nor are the weights checked whole, as
    # `up --dry-run` does not: the twin loads none, its probe reads config.json where the runtime
    # looks and says whether it is there (the plan's warning says the rest)
    plan = plan_for_up(slot, replace(options, publishes=False, dry_run=True, take_over=True), engine=engine)
    assert plan.compose is not None and plan.release is not None and plan.image is not None
    reference = image or plan.image
    if engine.image(reference) is None:
        if image:  # not the profile's: deploytool cannot say how it was made
            raise FieldError("image", "is not on this engine", value=image, hint="pull or build it first")
        wheelhouse = f" --wheelhouse {options.wheelhouse}" if options.wheelhouse else ""
        raise UsageError(
            f"image {reference} is not on this engine: the twin runs the release's image",
            hint=f"build it first: deploytool build --profile {plan.profile}{wheelhouse} (an image "
            "built with --wheelhouse DIR is named with the same --wheelhouse DIR here)",
        )
    release_project = slot.project(plan.release)
    project = f"{release_project}-cpu-twin"
    document, changes = twin_document(plan.compose, project=project, image=image)
    planned = [s for step in plan.steps if isinstance(step, Start) and step.new for s in step.sources]
    secret_env = secrets.resolve_values(planned) if planned else None
    warnings = list(plan.warnings)
    with tempfile.TemporaryDirectory(prefix="deploytool-cpu-twin-") as folder:
        path = Path(folder) / "compose.yaml"
        try:
            refused = _start(engine, project, path, document, secret_env)
            if refused is not None:
                # An engine whose own limits are lower (a dockerd in a container) cannot give the
                # release's ulimits: the twin starts without them, and says so, since the GPU
                # host's engine must give them to the release.
                limits = document["services"]["server"].pop("ulimits")
                changes.append(f"no ulimits {limits}: this engine refused them ({refused})")
                warnings.append(
                    f"this engine cannot set the release's ulimits {limits} ({refused}); "
                    "the GPU host's engine must allow them, or the release will not start there"
                )
                engine.compose(project, path, "down", "--timeout", "5", check=False, secret_env=secret_env)
                if _start(engine, project, path, document, secret_env) is not None:
                    raise DeployError("the CPU twin did not start without its ulimits either")
            exit_code, stdout, stderr = _wait(engine, f"{project}-server", timeout)
        finally:
            engine.compose(project, path, "down", "--timeout", "5", check=False, secret_env=secret_env)
    report = marked_answer(stdout, _MARKER)
    return TwinResult(
        slot=slot.name,
        release=plan.release,
        release_project=release_project,
        project=project,
        image=reference,
        command=list(plan.compose["services"]["server"]["command"]),
        changes=changes,
        exit_code=exit_code,
        report=report,
        stderr_tail=stderr.strip().splitlines()[-12:],
        warnings=warnings,
        seconds=round(time.monotonic() - started, 1),
    )


def _start(
    engine: Engine, project: str, path: Path, document: dict[str, Any], secret_env: dict[str, str] | None
) -> str | None:
    """`docker compose up` of the twin; the runtime's message when it refused the ulimits (None: started)."""
    path.write_text(dump_yaml(document))
    engine.compose_config(path, project=project)
    proc = engine.compose(
        project, path, "up", "--detach", "--no-build", "--pull", "never", check=False, secret_env=secret_env
    )
    if proc.returncode == 0:
        return None
    output = proc.stderr or proc.stdout
    found = re.search(r"error setting rlimit[^:]*: [^:]+", output)
    if found and document["services"]["server"].get("ulimits"):
        return found.group(0)
    raise DeployError(
        f"`docker compose up` of the CPU twin {project} failed:\n"
        + "\n".join("    " + x for x in output.strip().splitlines()[-12:])
    )


def _wait(engine: Engine, container_name: str, timeout: float) -> tuple[int, str, str]:
    container = engine.client.containers.get(container_name)
    deadline = time.monotonic() + timeout
    while True:
        container.reload()
        if container.status in ("exited", "dead"):
            break
        if time.monotonic() > deadline:
            raise DeployError(
                f"the CPU twin {container_name} did not finish within {timeout:g} s",
                hint="its log: docker logs " + container_name,
            )
        time.sleep(0.5)
    code = int(container.attrs["State"]["ExitCode"])
    return (
        code,
        container.logs(stdout=True, stderr=False).decode(errors="replace"),
        container.logs(stdout=False, stderr=True).decode(errors="replace"),
    )
