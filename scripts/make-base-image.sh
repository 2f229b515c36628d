#!/usr/bin/env bash
# Makes the local Debian base image that the `sim` recipe builds on. No image registry is
# needed: debootstrap fetches Debian packages from the machine's apt mirror and `docker import`
# turns the root file system into an image.
#
#   scripts/make-base-image.sh [NAME]     (default deploytool/base:bookworm; needs root)
set -euo pipefail
NAME=${1:-deploytool/base:bookworm}
SUITE=${DEPLOYTOOL_BASE_SUITE:-bookworm}

if docker image inspect "$NAME" >/dev/null 2>&1; then
  echo "base image: $NAME already present ($(docker image inspect -f '{{.Id}}' "$NAME"))"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "base image: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "base image: debootstrap needs root" >&2; exit 1; }

MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
ROOT=$(mktemp -d /tmp/deploytool-rootfs.XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
echo "base image: debootstrap $SUITE into $ROOT (about a minute)"
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,curl,ca-certificates \
  "$SUITE" "$ROOT" ${MIRROR:+"$MIRROR"} >/tmp/deploytool-debootstrap.log 2>&1 \
  || { tail -n 20 /tmp/deploytool-debootstrap.log >&2; exit 1; }
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/*
tar -C "$ROOT" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' - "$NAME" >/dev/null
echo "base image: $NAME $(docker image inspect -f '{{.Id}}' "$NAME")"
