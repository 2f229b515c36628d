"""k8s apply, k8s status, k8s rollback, and what `render --k8s` delegates to."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from ..errors import UsageError
from ..host.slots import DEFAULT_RETENTION
from .app import JsonOpt, ProfilesDirOpt, Typer, app, console_err, print_json

if TYPE_CHECKING:
    from ..k8s.cluster import Cluster
    from ..k8s.release import K8sRequest

k8s_app = Typer(
    help="The same release on Kubernetes: apply, status, rollback (docs/kubernetes.md).", no_args_is_help=True
)
app.add_typer(k8s_app, name="k8s")

ImageOpt = Annotated[
    str | None,
    typer.Option("--image", help="Release image by digest (NAME@sha256:...), as the cluster pulls it."),
]
ReplicasOpt = Annotated[
    int,
    typer.Option(
        "--replicas", help="Serving copies (each one the profile's GPUs, or nodes for a multi-node profile)."
    ),
]
NamespaceOpt = Annotated[str, typer.Option("--namespace", help="Kubernetes namespace.")]
NodeSelectorOpt = Annotated[
    list[str] | None, typer.Option("--node-selector", help="KEY=VALUE a node must carry (repeatable).")
]
TolerationOpt = Annotated[
    list[str] | None, typer.Option("--toleration", help="KEY[=VALUE]:EFFECT to tolerate (repeatable).")
]
FlavorOpt = Annotated[
    str,
    typer.Option("--k8s-flavor", help="plain (Deployment/LeaderWorkerSet) or ome (OME's InferenceService)."),
]
QualifyImageOpt = Annotated[
    str | None,
    typer.Option(
        "--qualify-image", help="Image with deploytool installed, by digest, for the qualify Job (required)."
    ),
]
ReleaseOpt = Annotated[
    int | None, typer.Option("--release", help="Release number (k8s apply: the cluster's current one + 1).")
]
RetentionOpt = Annotated[
    int, typer.Option("--retention", help="Previous releases kept for rollback (revisionHistoryLimit).")
]
SecretOpt = Annotated[
    str, typer.Option("--secret", help="Secret holding hf-token / api-key (referenced, never read).")
]
ContextOpt = Annotated[
    str | None, typer.Option("--context", help="kubeconfig context (default: the current one).")
]
# the flavors K8sRequest takes, by the name --k8s-flavor gives
_FLAVORS: dict[str, Literal["plain", "ome"]] = {"plain": "plain", "ome": "ome"}
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Only the cluster's server-side dry run; nothing changes.")
]


def build_request(
    *,
    profile: str,
    image: str | None,
    release: int | None,
    replicas: int,
    namespace: str,
    node_selector: list[str] | None,
    toleration: list[str] | None,
    flavor: str,
    qualify_image: str | None,
    retention: int,
    secret: str,
    profiles_dir: list[Path] | None,
) -> "K8sRequest":
    from ..k8s import release as rel
    from ..profiles import ProfileStore

    kind = _FLAVORS.get(flavor)
    if kind is None:
        raise UsageError(f"--k8s-flavor {flavor!r}: expected plain or ome")
    if not image:
        raise UsageError(
            "--image NAME@sha256:... is required for Kubernetes: every node pulls the image, so it "
            "must be in a registry the cluster reaches, pinned by digest",
            hint="after `deploytool build`: docker tag, docker push, then "
            "docker inspect --format '{{index .RepoDigests 0}}' IMAGE",
        )
    resolved = ProfileStore(profiles_dir).get(profile)
    return rel.K8sRequest(
        profile=resolved,
        image=image,
        toolchain=rel.declared_toolchain(resolved),
        release=release or 1,
        replicas=replicas,
        namespace=namespace,
        node_selector=rel.parse_node_selectors(node_selector),
        tolerations=rel.parse_tolerations(toleration),
        qualify_image=qualify_image,
        retention=retention,
        secret_name=secret,
        flavor=kind,
    )


def render_k8s(req: "K8sRequest", output: Path | None) -> None:
    """`render --k8s`: both stages to stdout, or one file per stage into the folder -o."""
    from ..k8s import release as rel
    from ..k8s.render import stages_text

    texts = stages_text(req)
    if output is None:
        typer.echo("---\n".join(texts.values()), nl=False)
        return
    output.mkdir(parents=True, exist_ok=True)
    for index, (stage, text) in enumerate(texts.items(), start=1):
        path = output / f"{index}-{stage}.yaml"
        path.write_text(text)
        console_err.print(f"wrote {path}", highlight=False)
    console_err.print(
        f"{rel.workload_kind(req.profile) if req.flavor == 'plain' else 'InferenceService'} for "
        f"{req.profile.name}: apply 1-canary.yaml, wait for the qualify Job, then 2-release.yaml "
        "(or `deploytool k8s apply`)",
        highlight=False,
    )


def _connect(context: str | None) -> "Cluster":
    from ..k8s.cluster import connect

    return connect(context)


@k8s_app.command("apply")
def apply_command(  # nosec B107: --secret's default is the Secret's name, never its value
    profile: Annotated[str, typer.Option("--profile", help="Profile to deploy.")],
    image: ImageOpt = None,
    replicas: ReplicasOpt = 1,
    namespace: NamespaceOpt = "default",
    node_selector: NodeSelectorOpt = None,
    toleration: TolerationOpt = None,
    flavor: FlavorOpt = "plain",
    qualify_image: QualifyImageOpt = None,
    release: ReleaseOpt = None,
    retention: RetentionOpt = DEFAULT_RETENTION,
    secret: SecretOpt = "deploytool",
    context: ContextOpt = None,
    dry_run: DryRunOpt = False,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Server-side dry run of every object, then canary, qualify Job, and promotion of the release."""
    from ..k8s import release as rel
    from ..k8s.apply import apply_release, current_release, stable_kind
    from ..k8s.render import render_stages

    req = build_request(
        profile=profile,
        image=image,
        release=release,
        replicas=replicas,
        namespace=namespace,
        node_selector=node_selector,
        toleration=toleration,
        flavor=flavor,
        qualify_image=qualify_image,
        retention=retention,
        secret=secret,
        profiles_dir=profiles_dir,
    )
    cluster = _connect(context)
    if release is None:
        kind = stable_kind(flavor, rel.workload_kind(req.profile))
        req.release = current_release(cluster, kind, namespace, req.app) + 1
    result = apply_release(
        cluster,
        render_stages(req),
        dry_run_only=dry_run,
        progress=lambda m: console_err.print(f"• {m}", highlight=False),
    )
    if json_output:
        print_json(result)
        return
    typer.echo(result.message)


def _status_args(profile: str, flavor: str, profiles_dir: list[Path] | None) -> tuple[str, tuple[str, str]]:
    from ..k8s import release as rel
    from ..k8s.apply import stable_kind
    from ..profiles import ProfileStore

    resolved = ProfileStore(profiles_dir).get(profile)
    return rel.app_name(resolved), stable_kind(flavor, rel.workload_kind(resolved))


@k8s_app.command("status")
def status_command(
    profile: Annotated[str, typer.Option("--profile", help="Profile whose release to show.")],
    namespace: NamespaceOpt = "default",
    flavor: FlavorOpt = "plain",
    context: ContextOpt = None,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """The serving release, its readiness, a canary in flight, the last qualification."""
    from ..k8s.apply import release_status

    app_name, kind = _status_args(profile, flavor, profiles_dir)
    status: dict[str, Any] = release_status(_connect(context), namespace=namespace, app=app_name, kind=kind)
    if json_output:
        print_json(status)
        return
    if not status["exists"]:
        typer.echo(f"{kind[1]} {app_name} is not in namespace {namespace}")
        return
    qual = status.get("last_qualification") or {}
    typer.echo(
        f"{kind[1]} {app_name}: release {status['release']} ({status['image']}), "
        f"{status['ready'] or 0}/{status['replicas']} ready"
        + (", canary in flight" if status["canary"] else "")
        + (f"; last qualification {qual['job']}: {qual['verdict']}" if qual else "")
    )


@k8s_app.command("rollback")
def rollback_command(
    profile: Annotated[str, typer.Option("--profile", help="Profile whose release to roll back.")],
    namespace: NamespaceOpt = "default",
    flavor: FlavorOpt = "plain",
    context: ContextOpt = None,
    dry_run: DryRunOpt = False,
    json_output: JsonOpt = False,
    profiles_dir: ProfilesDirOpt = None,
) -> None:
    """Back to the previous release the cluster kept (server-side dry run first)."""
    from ..k8s.history import rollback

    app_name, kind = _status_args(profile, flavor, profiles_dir)
    result = rollback(_connect(context), namespace=namespace, app=app_name, kind=kind, dry_run_only=dry_run)
    if json_output:
        print_json(result)
        return
    typer.echo(f"{result['plan']}: {result['message']}")
