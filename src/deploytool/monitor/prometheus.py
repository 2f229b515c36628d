"""What the monitor's Prometheus reads, written from data: its configuration (scrape jobs,
retention beside it in the compose command), the recording rules for the figures of
figures.py, the alerting rules a person would page on, and a Grafana dashboard over the same
recorded figures. `promtool check config` and `check rules` accept every file (the tests).

Recording rules name each figure `deploytool:<key>` over one minute, labelled by slot, release,
profile and card (the labels the scrape targets file puts on every series it scrapes).
"""

from __future__ import annotations

from typing import Any

from .figures import FIGURES
from .top import KV_NEAR_FULL

WINDOW = "1m"
RELEASES_JOB = "deploytool-releases"
# The same targets' /health, scraped as if it were metrics: SGLang answers it 200 with an empty
# body (zero samples, so `up` is 1) when healthy and 503 when its scheduler does not answer, while
# /metrics still answers. A wedged release is then seen by Prometheus alone, without an exporter.
HEALTH_JOB = "deploytool-health"
HEALTH_PATH = "/health"
CARDS_JOB = "dcgm-exporter"
# NVML's clock event reasons that mean heat or power holds the card down (host/gpu_live.py), as
# NVIDIA's dcgm-exporter reports them in one bitmask gauge.
THROTTLE_BITS = (0x8, 0x20, 0x40, 0x80)
THROTTLE_METRIC = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"


def record_name(key: str) -> str:
    return f"deploytool:{key}"


def config(
    *, scrape_interval_s: int, targets_path: str, rules_path: str, cards_exporter: str | None
) -> dict[str, Any]:
    """prometheus.yml. The scrape targets come from the file deploytool rewrites at every
    cut-over (deploy/scrape_targets.py); Prometheus re-reads it when it changes."""
    jobs: list[dict[str, Any]] = [
        {
            "job_name": job,
            "metrics_path": path,
            "file_sd_configs": [{"files": [targets_path], "refresh_interval": "30s"}],
        }
        for job, path in ((RELEASES_JOB, "/metrics"), (HEALTH_JOB, HEALTH_PATH))
    ]
    if cards_exporter:
        jobs.append({"job_name": CARDS_JOB, "static_configs": [{"targets": [cards_exporter]}]})
    return {
        "global": {
            "scrape_interval": f"{scrape_interval_s}s",
            "evaluation_interval": f"{scrape_interval_s}s",
            "scrape_timeout": f"{max(1, min(10, scrape_interval_s - 1 if scrape_interval_s > 1 else 1))}s",
        },
        "rule_files": [rules_path],
        "scrape_configs": jobs,
    }


def recording_rules() -> list[dict[str, Any]]:
    return [{"record": record_name(f.key), "expr": f.promql.replace("$w", WINDOW)} for f in FIGURES]


def alerting_rules(profiles: list[Any]) -> list[dict[str, Any]]:
    """The alerts: a release down, the KV pool near full for minutes, the queue growing, and,
    per profile that promises them, TTFT/TPOT p99 above its target and the accept length below
    its expect; a card throttling when the cards' exporter is scraped."""
    up = f'up{{job="{RELEASES_JOB}"}}'
    health = f'up{{job="{HEALTH_JOB}"}}'
    rules: list[dict[str, Any]] = [
        _alert(
            "DeploytoolReleaseDown",
            f"{up} == 0",
            "1m",
            "slot {{ $labels.slot }}: release {{ $labels.release }} does not answer /metrics",
            "The release the slot serves (its pointer) fails its scrape: stopped, restarting or unhealthy.",
        ),
        # only while /metrics answers: a release that is down altogether pages once, as down
        _alert(
            "DeploytoolReleaseUnhealthy",
            f"{health} == 0 unless on(slot, release) {up} == 0",
            "1m",
            "slot {{ $labels.slot }}: release {{ $labels.release }} fails its health check",
            f"{HEALTH_PATH} does not answer 200 while /metrics does: a scheduler that no longer answers (SGLang's "
            "health request times out), the process still running.",
        ),
        _alert(
            "DeploytoolKvPoolNearFull",
            f"{record_name('kv_use')} > {KV_NEAR_FULL}",
            "5m",
            "slot {{ $labels.slot }}: KV pool {{ $value | humanizePercentage }} full for 5 minutes",
            "New requests wait or retract; more cards, a shorter context or a smaller running limit.",
        ),
        _alert(
            "DeploytoolQueueGrowing",
            f"{record_name('queued')} > 0 and deriv({record_name('queued')}[5m]) > 0",
            "5m",
            "slot {{ $labels.slot }}: queue growing ({{ $value }} waiting)",
            "Requests arrive faster than the release serves them.",
        ),
    ]
    for profile in profiles:
        name = profile.name
        expect = ((profile.qualify or {}).get("preflight") or {}).get("expect") or {}
        accept = expect.get("min_accept_length")
        if isinstance(accept, (int, float)) and not isinstance(accept, bool):
            rules.append(
                _alert(
                    "DeploytoolAcceptLengthLow",
                    f'{record_name("spec_accept_length")}{{profile="{name}"}} < {accept}',
                    "10m",
                    f"slot {{{{ $labels.slot }}}}: accept length {{{{ $value }}}} below {name}'s {accept}",
                    "qualify.preflight.expect.min_accept_length: the draft model no longer pays off.",
                    profile=name,
                )
            )
        for key, what in (("ttft_p99_s", "TTFT p99"), ("tpot_p99_s", "TPOT p99")):
            target = getattr(profile.monitor, key, None)
            if target is not None:
                rules.append(
                    _alert(
                        f"Deploytool{what.replace(' ', '')}AboveTarget",
                        f'{record_name(key)}{{profile="{name}"}} > {target}',
                        "5m",
                        f"slot {{{{ $labels.slot }}}}: {what} {{{{ $value | humanizeDuration }}}} above {name}'s {target} s",
                        f"monitor.{key} of profile {name}.",
                        profile=name,
                    )
                )
    bits = " or ".join(f"floor({THROTTLE_METRIC} / {bit}) % 2 == 1" for bit in THROTTLE_BITS)
    rules.append(
        _alert(
            "DeploytoolCardThrottling",
            f"({bits})",
            "2m",
            "card {{ $labels.gpu }} ({{ $labels.UUID }}) held down for heat or power",
            "NVML clock event reasons: HW slowdown, SW/HW thermal slowdown or power brake.",
        )
    )
    return rules


def _alert(name: str, expr: str, for_: str, summary: str, description: str, **labels: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": "page", **labels},
        "annotations": {"summary": summary, "description": description},
    }


def rules_document(profiles: list[Any]) -> dict[str, Any]:
    return {
        "groups": [
            {"name": "deploytool-figures", "rules": recording_rules()},
            {"name": "deploytool-alerts", "rules": alerting_rules(profiles)},
        ]
    }


def dashboard(datasource: str = "Prometheus") -> dict[str, Any]:
    """A Grafana dashboard (its JSON model): one time-series panel per figure, each the recorded
    figure by slot and release."""
    units = {"s": "s", "ratio": "percentunit", "tok/s": "short", "1/s": "reqps", "": "short"}
    panels = []
    for i, figure in enumerate(FIGURES):
        panels.append(
            {
                "id": i + 1,
                "type": "timeseries",
                "title": figure.title,
                "gridPos": {"h": 8, "w": 8, "x": (i % 3) * 8, "y": (i // 3) * 8},
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "fieldConfig": {"defaults": {"unit": units.get(figure.unit, "short")}, "overrides": []},
                "targets": [
                    {
                        "refId": "A",
                        "expr": f'{record_name(figure.key)}{{slot=~"$slot"}}',
                        "legendFormat": "{{slot}} r{{release}} {{profile}}",
                    }
                ],
            }
        )
    return {
        "title": "deploytool: what serves",
        "uid": "deploytool-serving",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "10s",
        "tags": ["deploytool", "sglang"],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"text": datasource},
                },
                {
                    "name": "slot",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": f"label_values({record_name('running')}, slot)",
                    "includeAll": True,
                    "multi": True,
                    "current": {"text": "All", "value": "$__all"},
                },
            ]
        },
        "panels": panels,
    }
