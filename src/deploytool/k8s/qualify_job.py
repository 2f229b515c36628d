"""The qualify Job of a Kubernetes release: `deploytool qualify` against the canary, the gate
`k8s apply` waits for before it promotes. Both flavours (plain and OME) add it to their canary
stage."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from . import pod
from . import release as rel
from .release import K8sRequest

QUALIFY_REPORT_DIR = "/tmp/qualify-report"  # nosec B108: a folder inside the Job's own container
JOB_USER = 65534  # nobody
# deploytool qualify is an HTTP client holding a few suites' transcripts (the needle prompt, about
# 225K tokens of text, is the largest): bounded well above that.
JOB_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "4Gi"}}


def qualify_job_name(req: K8sRequest) -> str:
    """Per release and per what is qualified (image, qualify image, argv, toolchain): a retry
    with other inputs gets its own Job (a Job's template cannot change), the same inputs the
    same name (`k8s apply` removes a finished one before it qualifies them again)."""
    inputs = json.dumps(
        [req.image, req.qualify_image, pod.launch_command(req), req.toolchain], sort_keys=True
    )
    suffix = f"-qualify-r{req.release}-{hashlib.sha256(inputs.encode()).hexdigest()[:6]}"
    return req.app[: 63 - len(suffix)].rstrip("-") + suffix


def canary_url(req: K8sRequest, host: str | None = None, port: int | None = None) -> str:
    host = host or f"{req.app}-canary.{req.namespace}.svc"
    return f"http://{host}:{port or req.profile.server.port}"


def qualify_job(req: K8sRequest, url: str | None = None) -> dict[str, Any]:
    """`deploytool qualify` against the canary, after an init container waited for the canary
    to answer its health path for the whole start budget. The Job's success is the gate
    `k8s apply` waits for before it promotes; its failure leaves the stable release serving."""
    url = url or canary_url(req)
    budget = req.profile.health.budget_seconds()
    # each try and each pause within what is left of the budget: the Job says the canary never
    # became healthy at the end of its budget, not up to a probe and a pause later
    wait = (
        "import sys,time,urllib.request\n"
        "url, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])\n"
        "while time.monotonic() < deadline:\n"
        "    try:\n"
        "        urllib.request.urlopen(url, timeout=max(0.5, min(10, deadline - time.monotonic()))).read()\n"
        "        sys.exit(0)\n"
        "    except Exception:\n"
        "        time.sleep(max(0, min(5, deadline - time.monotonic())))\n"
        "sys.exit('canary never became healthy at ' + url)\n"
    )
    # deploytool needs no root: it runs as nobody, its state and home in /tmp
    env = [{"name": "HOME", "value": "/tmp"}, {"name": "DEPLOYTOOL_HOME", "value": "/tmp/deploytool"}]  # nosec B108: the Job's container's own /tmp
    key_args, key_mounts, key_volumes = pod.api_key_file_mount(req, group=JOB_USER)
    container: dict[str, Any] = pod.bounded(
        pod.secured(
            {
                "name": "qualify",
                "image": req.job_image,
                "command": [
                    "deploytool",
                    "qualify",
                    "--url",
                    url,
                    "--profile",
                    req.profile.name,
                    "--no-progress",
                    "--report",
                    QUALIFY_REPORT_DIR,
                    *key_args,
                ],
                "env": env,
                # the root file system is read-only (pod.secured): deploytool's home, state and report in /tmp
                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, *key_mounts],  # nosec B108: the Job's own emptyDir
            }
        ),
        JOB_RESOURCES,
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": rel.metadata(req, qualify_job_name(req), "canary"),
        "spec": {
            "backoffLimit": 0,  # a failed gate is an answer, not a flake to retry
            "activeDeadlineSeconds": budget + 6 * 3600,  # start budget + the longest suites
            "ttlSecondsAfterFinished": 7 * 24 * 3600,  # the verdict stays readable for a week
            "template": {
                "metadata": {
                    "labels": {
                        "app.kubernetes.io/name": req.app,
                        "app.kubernetes.io/component": "qualify",
                        f"{rel.LABEL_DOMAIN}/release": str(req.release),
                    }
                },
                "spec": {
                    "restartPolicy": "Never",
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    # the whole restricted profile: the Job's image needs no root
                    "securityContext": {
                        **pod.POD_SECURITY,
                        "runAsNonRoot": True,
                        "runAsUser": JOB_USER,
                        "runAsGroup": JOB_USER,
                        "fsGroup": JOB_USER,
                    },
                    "initContainers": [
                        pod.bounded(
                            pod.secured(
                                {
                                    "name": "wait-for-canary",
                                    "image": req.job_image,
                                    "command": [
                                        "python3",
                                        "-c",
                                        wait,
                                        url + req.profile.health.path,
                                        str(budget),
                                    ],
                                }
                            )
                        )
                    ],
                    "containers": [container],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}, *key_volumes],
                },
            },
        },
    }
