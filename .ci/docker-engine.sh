#!/usr/bin/env bash
# Installs and starts a Docker Engine (>= 25, for healthcheck start_interval) with the
# compose v2 plugin and buildx, on a Debian bookworm machine, without replacing its libc or
# Python: only the docker packages come from trixie, through a low-priority apt pin.
#
#   .ci/docker-engine.sh install   # idempotent; needs root
#   .ci/docker-engine.sh start     # starts dockerd in the background unless an engine answers
#   .ci/docker-engine.sh stop      # stops the dockerd that `start` started (pid file)
set -euo pipefail

PIDFILE=${DEPLOYTOOL_DOCKERD_PIDFILE:-/tmp/deploytool-dockerd.pid}
LOG=${DEPLOYTOOL_DOCKERD_LOG:-/tmp/deploytool-dockerd.log}

engine_ok() {
  # The server's major version, or nothing when no engine answers.
  local v
  v=$(docker version --format '{{.Server.Version}}' 2>/dev/null) || return 1
  [ "${v%%.*}" -ge 25 ]
}

install() {
  if engine_ok && docker compose version >/dev/null 2>&1; then
    echo "docker-engine: engine and compose plugin already present"; return 0
  fi
  if command -v dockerd >/dev/null && [ "$(dockerd --version | sed -E 's/.* ([0-9]+)\..*/\1/')" -ge 25 ] \
     && docker compose version >/dev/null 2>&1 && command -v debootstrap >/dev/null; then
    echo "docker-engine: packages already installed"; return 0
  fi
  # Reuse the mirror the machine already uses for bookworm, so no host is written here.
  if [ ! -f /etc/apt/sources.list.d/deploytool-trixie.sources ]; then
    sed -E -e 's/^Suites:.*security.*/Suites: trixie-security/' \
           -e 's/^Suites: bookworm bookworm-updates/Suites: trixie/' \
           -e '/^#/d' /etc/apt/sources.list.d/debian.sources \
      | awk 'BEGIN{RS="";ORS="\n\n"} /Suites: trixie$/ || /Suites: trixie\n/' \
      > /etc/apt/sources.list.d/deploytool-trixie.sources
    printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' > /etc/apt/preferences.d/deploytool-trixie
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    docker.io/trixie docker-cli/trixie docker-compose/trixie docker-buildx/trixie \
    debootstrap iptables >/dev/null
  echo "docker-engine: installed $(dockerd --version)"
}

start() {
  if engine_ok; then echo "docker-engine: an engine already answers"; return 0; fi
  # The image's own docker client may shadow the engine's; prefer the packaged one.
  nohup /usr/sbin/dockerd >"$LOG" 2>&1 &
  echo $! > "$PIDFILE"
  for _ in $(seq 1 60); do
    if engine_ok; then echo "docker-engine: dockerd started (pid $(cat "$PIDFILE"))"; return 0; fi
    sleep 1
  done
  echo "docker-engine: dockerd did not answer within 60 s; last lines of $LOG:" >&2
  tail -n 20 "$LOG" >&2
  return 1
}

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid; pid=$(cat "$PIDFILE")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  fi
  rm -f "$PIDFILE"
  echo "docker-engine: dockerd stopped"
}

"${1:-install}"
