#!/usr/bin/env bash
# `make demo`: the whole lifecycle on the embedded default (deploytool's reference runtime,
# a simulator, not a model) on a machine with a Docker engine and no GPU. Every step is a real
# deploytool command, printed before it runs.
set -euo pipefail
export DEPLOYTOOL_HOME=${DEPLOYTOOL_HOME:-$PWD/.deploytool}
PORT=${DEMO_PORT:-30000}
LIMIT=${DEMO_LIMIT:-40}

run() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

run deploytool profiles list
run deploytool build --profile sim
run deploytool build --profile sim            # same inputs: nothing to build
run deploytool up --cpu --profile sim --port "$PORT" --limit "$LIMIT"
run deploytool up --cpu --profile sim-v2 --port "$PORT" --limit "$LIMIT"
run deploytool status
run deploytool rollback --cpu
run deploytool status
run deploytool journal --cpu --limit 12

printf '\n\033[1mSummary\033[0m\n'
deploytool status --json | python3 -c '
import json, sys
for slot in json.load(sys.stdin)["slots"]:
    print(f"slot {slot[\"slot\"]}: serving {slot[\"serving_url\"]}")
    for r in slot["releases"]:
        role = f" ({r[\"role\"]})" if r["role"] else ""
        print(f"  release {r[\"release\"]}{role}: {r[\"profile\"]} [{r[\"state\"]}, {r[\"health\"]}] {r[\"image\"]}")
print("The reference runtime is a simulator, not a model: docs/sim.md lists the rules it answers by.")
print("Qualification reports:", sys.argv[1] + "/slots/cpu/releases/*/qualify/report.html")
print("Stop it with: docker stop $(docker ps -q --filter label=dev.deploytool.slot=cpu)")
' "$DEPLOYTOOL_HOME"
