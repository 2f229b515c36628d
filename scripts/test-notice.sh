#!/usr/bin/env bash
# Said before `make test` starts: what on this host could interfere with the suite, and how the
# suite avoids it. It never stops anything and never fails: the suite runs on its own instance
# (DEPLOYTOOL_INSTANCE=test-...), state directory and free ports, whatever it says here.
set -u
PYTHON=${1:-python3}
notes=()

if docker info >/dev/null 2>&1; then
  # releases of any deploytool instance that is not a test run's (the demo's, a person's own)
  while IFS='|' read -r name instance slot address; do
    case "$instance" in test-*|"") continue ;; esac
    notes+=("a deploytool release serves: $name (instance $instance, slot $slot, on $address); the tests use their own instance and never touch it")
  done < <(docker ps --filter label=dev.deploytool.managed=true --format \
           '{{.Names}}|{{.Label "dev.deploytool.instance"}}|{{.Label "dev.deploytool.slot"}}|{{.Label "dev.deploytool.host-ip"}}:{{.Label "dev.deploytool.host-port"}}')
  left=$(docker ps -aq --filter label=dev.deploytool.instance | xargs -r docker inspect \
         -f '{{index .Config.Labels "dev.deploytool.instance"}}' | grep -c '^test-')
  [ "${left:-0}" -gt 0 ] && notes+=("$left container(s) of other test runs are on the engine (a run beside this one, or one that was killed): this run does not use them; .ci/run's clean-up removes those left")
fi

# the profiles' default port: the tests that exercise it hold it themselves; every server a
# test starts gets a free port of its own (20000-29999)
while read -r line; do [ -n "$line" ] && notes+=("$line"); done < <("$PYTHON" - <<'PY'
import socket
for port in (30000, 30001):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            print(f"port {port} on 127.0.0.1 is in use: the tests avoid it (each server a test starts gets a free port)")
PY
)

# host programs some tests drive: without one, its tests skip (saying so); CI installs them
here=$(cd "$(dirname "$0")" && pwd)
while read -r line; do [ -n "$line" ] && notes+=("$line"); done < <("$BASH" "$here/test-tools.sh" missing)

if [ ${#notes[@]} -gt 0 ]; then
  echo "before the tests, on this host (the suite goes on; nothing here is touched):"
  for n in "${notes[@]}"; do echo "  - $n"; done
fi
exit 0
