"""Offline validation of rendered objects, with no cluster.

Built-in kinds (Deployment, Service, Job, PodDisruptionBudget, NetworkPolicy) against the Kubernetes OpenAPI
schemas the `kubernetes-validate` package ships (one folder per minor version), in its strict
variant: an unknown field is an error, as it is for `kubectl apply` with server-side field
validation. Custom kinds (LeaderWorkerSet, OME's resources) against the openAPIV3Schema of the
published CRD, made strict the same way (an API server would prune unknown fields silently).

The CRD files ship with deploytool (data/k8s-crds: the published OME and LeaderWorkerSet CRDs,
with their licences and upstream commits in SOURCES.md), so validation needs no network and no
checkout of those projects; DEPLOYTOOL_K8S_CRDS names other folders instead (another release of
either project).
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from ..errors import UsageError

# The range the tests validate every profile against: every minor kubernetes-validate 1.37 ships.
K8S_VERSIONS = tuple(f"1.{minor}" for minor in range(25, 38))
BUILTIN_GROUPS = {"v1", "apps/v1", "batch/v1", "policy/v1", "networking.k8s.io/v1"}
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass
class Finding:
    kind: str
    name: str
    schema: str  # 'kubernetes 1.31' or the CRD file
    message: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name} against {self.schema}: {self.message}"


# -- built-in kinds ---------------------------------------------------------------------------
def available_versions() -> list[str]:
    try:
        from kubernetes_validate.utils import all_versions
    except ImportError:
        return []
    return sorted(
        {".".join(v.split(".")[:2]) for v in all_versions()}, key=lambda v: tuple(map(int, v.split(".")))
    )


@functools.lru_cache(maxsize=256)
def _builtin_validator(version: str, kind: str, api_version: str) -> jsonschema.protocols.Validator:
    # kubernetes-validate's own files and resolution (utils.validate), with the validator kept:
    # re-reading the 3 MB definitions file per object would dominate a test run.
    from kubernetes_validate.utils import schema_contents
    from referencing import Registry, Resource

    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{version}.0-local-strict"
    schema = schema_contents(f"{folder}/{kind.lower()}-{group}.json", version)
    definitions = schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate_builtin(obj: dict[str, Any], version: str) -> list[Finding]:
    validator = _builtin_validator(version, obj["kind"], obj["apiVersion"])
    return [
        Finding(
            obj["kind"],
            obj["metadata"]["name"],
            f"kubernetes {version}",
            f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}",
        )
        for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]


# -- custom kinds -----------------------------------------------------------------------------
def crd_dirs() -> list[Path]:
    """DEPLOYTOOL_K8S_CRDS (folders, os.pathsep-separated), else the copies shipped in the package."""
    from ..resources import package_dir

    env = os.environ.get("DEPLOYTOOL_K8S_CRDS")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [package_dir() / "data" / "k8s-crds"]


@dataclass
class CrdSchema:
    source: Path
    schema: dict[str, Any]
    scope: str  # Namespaced | Cluster


@functools.lru_cache(maxsize=8)
def load_crds(dirs: tuple[Path, ...]) -> dict[tuple[str, str], CrdSchema]:
    """(apiVersion, kind) -> the served version's openAPIV3Schema, from every CRD file found."""
    found: dict[tuple[str, str], CrdSchema] = {}
    for folder in dirs:
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*.yaml")):
            # 4.7 MB of YAML: libyaml reads it in about a second, the pure-Python loader in about eight
            for doc in yaml.load_all(path.read_text(), Loader=_YAML_LOADER):
                if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                for version in spec["versions"]:
                    if version.get("served") and "schema" in version:
                        key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                        found.setdefault(
                            key,
                            CrdSchema(
                                path,
                                strict_schema(version["schema"]["openAPIV3Schema"]),
                                spec.get("scope", "Namespaced"),
                            ),
                        )
    return found


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """additionalProperties: false wherever the CRD lists properties and does not keep unknown
    fields: what the API server's pruning would drop silently becomes an error here."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if (
                "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    # ObjectMeta is checked separately (check_metadata); a CRD schema says only 'type: object'.
    return schema


@functools.lru_cache(maxsize=32)
def _crd_validator(source: str, api_version: str, kind: str) -> jsonschema.protocols.Validator:
    crd = load_crds(tuple(crd_dirs()))[(api_version, kind)]
    return jsonschema.Draft7Validator(crd.schema)


def validate_custom(obj: dict[str, Any]) -> list[Finding]:
    crds = load_crds(tuple(crd_dirs()))
    key = (obj["apiVersion"], obj["kind"])
    if key not in crds:
        raise UsageError(
            f"no CRD schema for {obj['apiVersion']} {obj['kind']} in {', '.join(map(str, crd_dirs()))}",
            hint="set DEPLOYTOOL_K8S_CRDS to a folder holding the published CRD YAML "
            "(docs/kubernetes.md lists which)",
        )
    crd = crds[key]
    findings = check_metadata(obj, namespaced=crd.scope == "Namespaced")
    validator = _crd_validator(str(crd.source), *key)
    findings += [
        Finding(
            obj["kind"],
            obj["metadata"]["name"],
            crd.source.name,
            f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}",
        )
        for e in validator.iter_errors(obj)
    ]
    return findings


def check_metadata(obj: dict[str, Any], *, namespaced: bool) -> list[Finding]:
    """The ObjectMeta rules a CRD schema leaves to the API server: name, namespace, labels."""
    meta, out = obj.get("metadata", {}), []
    name = meta.get("name", "")

    def bad(message: str) -> None:
        out.append(Finding(obj["kind"], name, "ObjectMeta", message))

    if not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
        bad(f"name {name!r} is not a DNS subdomain")
    if namespaced != ("namespace" in meta):
        bad("namespace " + ("missing on a namespaced kind" if namespaced else "set on a cluster-scoped kind"))
    for key, value in (meta.get("labels") or {}).items():
        if not _LABEL_VALUE.match(str(value)) or len(str(value)) > 63:
            bad(f"label {key}={value!r} is not a valid label value")
    return out


def crds_available(kinds: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (apiVersion, kind) pairs among `kinds` with no CRD schema on hand."""
    crds = load_crds(tuple(crd_dirs()))
    return [k for k in kinds if k not in crds]


# -- one entry point --------------------------------------------------------------------------
def validate_objects(objects: list[dict[str, Any]], versions: Iterable[str] = K8S_VERSIONS) -> list[Finding]:
    findings: list[Finding] = []
    versions = list(versions)
    for obj in objects:
        if obj["apiVersion"] in BUILTIN_GROUPS:
            if obj["kind"] == "Service" and not _DNS_LABEL.match(obj["metadata"]["name"]):
                findings.append(
                    Finding(
                        "Service",
                        obj["metadata"]["name"],
                        "ObjectMeta",
                        "a Service name must be a DNS-1035 label",
                    )
                )
            for version in versions:
                findings += validate_builtin(obj, version)
        else:
            findings += validate_custom(obj)
    return findings
