"""What changed between two releases, as a short list for the cutover report: from both
qualifications' results.json (the image and its labels, the server's self-description, the
card) and the releases' records (release.json). A pure function."""

from __future__ import annotations

import json
from typing import Any


def figures_by_suite(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each suite's figures in a results.json document, by suite name (the first suite of a
    name; {} for one that has none), read once for every row that compares them."""
    out: dict[str, dict[str, Any]] = {}
    for suite in doc.get("suites") or []:
        figures = suite.get("figures")
        out.setdefault(suite.get("name"), figures if isinstance(figures, dict) else {})
    return out


def suite_figures(doc: dict[str, Any], suite: str) -> dict[str, Any]:
    return figures_by_suite(doc).get(suite, {})


# What changed between two releases: from results.json's target and server facts, and release.json.
# Server-info fields that differ run to run without anyone changing anything.
_VOLATILE = {
    "port",
    "host",
    "startup_time",
    "status",
    "internal_states",
    "launch_command",
    "weight_version",
    "max_total_num_tokens",
    "max_req_input_len",
}


def release_changes(
    before: dict[str, Any], now: dict[str, Any], before_record: dict[str, Any], now_record: dict[str, Any]
) -> list[str]:
    """A short list, one line per thing that differs: image, runtime version or commit, patches,
    launch flags, weights, card, profile. Empty when nothing recorded differs."""
    out: list[str] = []
    t_before, t_now = before.get("target") or {}, now.get("target") or {}

    def differ(what: str, a: Any, b: Any) -> None:
        if a != b and (a is not None or b is not None):
            out.append(f"{what}: {_short(a)} -> {_short(b)}")

    differ(
        "profile",
        before_record.get("profile") or t_before.get("profile"),
        now_record.get("profile") or t_now.get("profile"),
    )
    differ(
        "image",
        before_record.get("image") or t_before.get("image"),
        now_record.get("image") or t_now.get("image"),
    )
    info_before = (before.get("server") or {}).get("server_info") or {}
    info_now = (now.get("server") or {}).get("server_info") or {}
    differ("runtime version", info_before.get("version"), info_now.get("version"))
    tool_before, tool_now = _toolchain(t_before), _toolchain(t_now)
    for key in sorted({*tool_before, *tool_now}):
        differ(f"image {key}", tool_before.get(key), tool_now.get(key))
    labels_before, labels_now = t_before.get("image_labels") or {}, t_now.get("image_labels") or {}
    source = "dev.deploytool.runtime-source"
    differ("runtime source (commit)", labels_before.get(source), labels_now.get(source))
    model = lambda t, r: (r.get("model") or t.get("model") or {}).get("identity")  # noqa: E731
    differ("weights", model(t_before, before_record), model(t_now, now_record))
    differ("card", _card(before), _card(now))
    flags = [k for k in sorted({*info_before, *info_now}) if k not in _VOLATILE]
    for key in flags:
        a, b = info_before.get(key), info_now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            for inner in sorted({*a, *b} - _VOLATILE):
                differ(f"launch {key}.{inner}", a.get(inner), b.get(inner))
        else:
            differ(f"launch {key}", a, b)
    return out


def _toolchain(target: dict[str, Any]) -> dict[str, Any]:
    raw = (target.get("image_labels") or {}).get("dev.deploytool.toolchain")
    try:
        data = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        return {"toolchain": raw}
    return data if isinstance(data, dict) else {}


def _card(doc: dict[str, Any]) -> str | None:
    gpu = suite_figures(doc, "preflight").get("gpu")
    if isinstance(gpu, dict):
        return str(gpu.get("name") or gpu.get("card") or json.dumps(gpu, sort_keys=True))
    return None if gpu is None else str(gpu)


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."
