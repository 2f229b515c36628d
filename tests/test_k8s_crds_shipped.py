"""The published CRDs deploytool ships for offline validation (data/k8s-crds): every kind the
renderer emits has its schema there, each file's upstream commit and its project's licence are
beside it, and the copies are the files the project was handed (../shared/k8s-crds, where a
checkout has it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploytool.k8s.validate import crd_dirs, load_crds
from deploytool.resources import package_dir

SHIPPED = package_dir() / "data" / "k8s-crds"
RENDERED_CUSTOM_KINDS = {
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("ome.io/v1beta1", "InferenceService"),
    ("ome.io/v1beta1", "ClusterServingRuntime"),
    ("ome.io/v1beta1", "ClusterBaseModel"),
}


def test_every_rendered_custom_kind_has_a_shipped_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEPLOYTOOL_K8S_CRDS", raising=False)
    assert crd_dirs() == [SHIPPED]
    crds = load_crds((SHIPPED,))
    assert set(crds) >= RENDERED_CUSTOM_KINDS
    assert {crds[k].scope for k in RENDERED_CUSTOM_KINDS} == {"Namespaced", "Cluster"}


def test_each_shipped_file_names_its_upstream_commit_and_keeps_its_licence() -> None:
    sources = (SHIPPED / "SOURCES.md").read_text()
    files = sorted(SHIPPED.rglob("*.yaml"))
    assert files
    for path in files:
        assert path.name in sources, f"{path} is not listed in SOURCES.md"
        assert (path.parent / "LICENSE").is_file(), f"{path.parent} has no LICENSE"
        assert f"`{path.parent.name}/`" in sources
    assert (
        SHIPPED / "ome" / "NOTICE"
    ).is_file()  # OME's NOTICE travels with its files (Apache-2.0, section 4d)
    for commit in ("17b77edad23bae262e0c9adb7f12039397a5d33d", "060ab4da17eea1f0865fcbd3236bb1075e2cea32"):
        assert commit in sources


def _handed_over() -> Path | None:
    root = package_dir().parents[1]
    for candidate in (
        root / "shared" / "k8s-crds",
        root.parent / "shared" / "k8s-crds",
        root.parent.parent / "shared" / "k8s-crds",
    ):
        if candidate.is_dir():
            return candidate
    return None


def test_the_shipped_copies_are_the_published_files() -> None:
    handed = _handed_over()
    if handed is None:
        pytest.skip("no shared/k8s-crds beside this checkout to compare the shipped copies with")
    theirs = {p.relative_to(handed) for p in handed.rglob("*") if p.is_file()}
    ours = {p.relative_to(SHIPPED) for p in SHIPPED.rglob("*") if p.is_file()} - {Path("SOURCES.md")}
    assert ours == theirs
    for relative in theirs:
        assert (SHIPPED / relative).read_bytes() == (handed / relative).read_bytes(), relative
