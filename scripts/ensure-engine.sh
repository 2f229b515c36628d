#!/usr/bin/env bash
# Makes sure a Docker Engine >= 25 with the compose v2 plugin answers. When none does and this
# is a Debian machine where we are root, installs and starts one (.ci/docker-engine.sh);
# otherwise says what is missing and how to get it.
#   scripts/ensure-engine.sh             exit 1 when no engine can be had
#   scripts/ensure-engine.sh --optional  exit 0 anyway (the tests then skip what needs it)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
optional=${1:-}

ok() {
  local v
  v=$(docker version --format '{{.Server.Version}}' 2>/dev/null) || return 1
  [ "${v%%.*}" -ge 25 ] && docker compose version >/dev/null 2>&1
}

if ok; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ -f /etc/apt/sources.list.d/debian.sources ]; then
  echo "engine: no Docker engine answers; installing one (Debian packages) and starting dockerd"
  "$here/.ci/docker-engine.sh" install && "$here/.ci/docker-engine.sh" start && ok && exit 0
fi
cat >&2 <<'MSG'
engine: no Docker Engine >= 25 with the compose v2 plugin is reachable.
  deploytool needs one to build images and run releases. Install Docker Engine and the
  compose plugin (docs/install.md), start it, and make sure `docker info` works for you.
  On Debian as root, `.ci/docker-engine.sh install && .ci/docker-engine.sh start` does it.
MSG
[ "$optional" = "--optional" ] && exit 0
exit 1
