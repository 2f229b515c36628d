"""The Kubernetes target: the same release, rendered as Kubernetes objects from the same profile.

release.py      what every object shares: the request, names, what the profile implies, labels
pod.py          the pod: server container, probes, init containers, volumes, scheduling, secrets
render.py       the plain flavour: Deployment or LeaderWorkerSet, Services, PDB, canary
ome.py          the OME flavour: ClusterBaseModel, ClusterServingRuntime, InferenceService
qualify_job.py  the qualify Job both flavours run against their canary
network.py      the NetworkPolicy both flavours put around their servers
validate.py     offline validation: Kubernetes OpenAPI schemas (kubernetes-validate), CRD schemas
cluster.py      the REST calls, through the official `kubernetes` client
apply.py        apply and status (dry run first)
history.py      rollback, and the history it returns to

Everything but cluster.py, apply.py and history.py is pure: (profile, request) -> list of
dicts. docs/kubernetes.md says how a release maps to objects and what was only validated
offline.
"""

from .release import K8sRequest, declared_toolchain
from .render import render_manifests, render_stages

__all__ = ["K8sRequest", "declared_toolchain", "render_manifests", "render_stages"]
