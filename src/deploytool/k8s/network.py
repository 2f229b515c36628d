"""The NetworkPolicy that fences a release's servers, the same for both flavours: the plain
flavour's Deployment or LeaderWorkerSet pods and the pods OME builds from the runtime carry
the same labels (release.labels, which OME copies from the engine's labels onto its pods).

Pure: (K8sRequest) -> dict.
"""

from __future__ import annotations

from typing import Any

from . import release as rel
from .release import K8sRequest

GATEWAY_LABEL = f"{rel.LABEL_DOMAIN}/gateway"  # "true" on the gateway's pods, in the release's namespace


def network_policy(req: K8sRequest, port: int | str = "http") -> dict[str, Any]:
    """Who may reach the release's servers (both tracks): the gateway's pods (labelled
    GATEWAY_LABEL=true in the namespace) and the qualify Job, on the HTTP port; the release's
    own pods on any port (the ranks of a copy that spans nodes talk to each other). Nothing
    else: a pod that is neither cannot call the server or its admin endpoints.

    `port` is the server container's port by name (the plain flavour names it) or by number
    (OME builds the pods and may name the port its own way; the number is the profile's)."""
    app = req.app
    server = {"app.kubernetes.io/name": app, "app.kubernetes.io/component": "inference-server"}
    http = [{"port": port, "protocol": "TCP"}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": rel.metadata(req, f"{app}-ingress"),
        "spec": {
            "podSelector": {"matchLabels": dict(server)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {GATEWAY_LABEL: "true"}}}], "ports": http},
                {
                    "from": [
                        {
                            "podSelector": {
                                "matchLabels": {
                                    "app.kubernetes.io/name": app,
                                    "app.kubernetes.io/component": "qualify",
                                }
                            }
                        }
                    ],
                    "ports": [dict(p) for p in http],
                },
                {"from": [{"podSelector": {"matchLabels": dict(server)}}]},
            ],
        },
    }


def qualify_policy(req: K8sRequest) -> dict[str, Any]:
    """The qualify Job's pods serve nothing: no ingress at all (a policy that selects them and
    admits no one). Its egress, to the canary, stays open: the Job reads the canary's Service."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": rel.metadata(req, f"{req.app}-qualify-ingress"),
        "spec": {
            "podSelector": {
                "matchLabels": {"app.kubernetes.io/name": req.app, "app.kubernetes.io/component": "qualify"}
            },
            "policyTypes": ["Ingress"],
        },
    }
