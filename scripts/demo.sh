#!/usr/bin/env bash
# `make demo`: the whole lifecycle on the embedded default (deploytool's reference runtime,
# a simulator, not a model) on a machine with a Docker engine and no GPU. Every step is a real
# deploytool command, printed before it runs.
set -euo pipefail
PORT=${DEMO_PORT:-30000}
LIMIT=${DEMO_LIMIT:-40}

run() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

run deploytool profiles list
run deploytool build --profile sim
run deploytool build --profile sim            # same inputs: nothing to build
run deploytool up --cpu --profile sim --port "$PORT" --limit "$LIMIT"
run deploytool up --cpu --profile sim-v2 --port "$PORT" --limit "$LIMIT" --dry-run   # the plan, nothing changed
run deploytool up --cpu --profile sim-v2 --port "$PORT" --limit "$LIMIT"
run deploytool status
run deploytool rollback --cpu
run deploytool status
run deploytool journal --cpu --limit 12

printf '\n\033[1mSummary\033[0m\n'
deploytool status --json | python3 scripts/demo_summary.py
