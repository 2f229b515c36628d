"""The Kubernetes target: the same release, rendered as Kubernetes objects from the same profile.

release.py   what every object shares: names, labels, the server container, probes, volumes
render.py    the plain flavour: Deployment or LeaderWorkerSet, Services, PDB, canary, qualify Job
ome.py       the OME flavour: ClusterBaseModel, ClusterServingRuntime, InferenceService
validate.py  offline validation: Kubernetes OpenAPI schemas (kubernetes-validate), CRD schemas
apply.py     apply / status / rollback through the official `kubernetes` client

Everything but apply.py is pure: (profile, request) -> list of dicts. docs/kubernetes.md says
how a release maps to objects and what was only validated offline.
"""

from .release import K8sRequest, declared_toolchain
from .render import render_manifests, render_stages

__all__ = ["K8sRequest", "declared_toolchain", "render_manifests", "render_stages"]
