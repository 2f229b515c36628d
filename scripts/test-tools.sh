#!/usr/bin/env bash
# The host programs some tests drive, each test skipping (saying so) without its program.
#   scripts/test-tools.sh missing   one line a missing program: what it is for, the package
#   scripts/test-tools.sh install   apt-get installs the missing ones (root); idempotent
#   scripts/test-tools.sh install --optional   the same, but where it cannot (no root, no apt, no
#                                   package index) it says so and exits 0: the tests skip instead
set -u
# program|Debian package|what the suite uses it for
TOOLS=(
  "chromium|chromium|the HTML reports and the monitor's pages, opened in a headless browser"
  "nginx|nginx|the gateway a rollout drains through"
  "tmux|tmux|deploytool top in a real terminal"
  "promtool|prometheus|the monitor's alert rules and a real Prometheus scraping a release"
)

missing() {
  for t in "${TOOLS[@]}"; do
    IFS='|' read -r prog pkg why <<<"$t"
    command -v "$prog" >/dev/null 2>&1 || [ -x "/usr/sbin/$prog" ] || echo "$prog|$pkg|$why"
  done
}

case "${1:-missing}" in
  missing)
    missing | while IFS='|' read -r prog pkg why; do
      echo "$prog is not installed: the tests of $why skip (\`make test-tools\`, or apt-get install $pkg)"
    done ;;
  install)
    pkgs=$(missing | cut -d'|' -f2 | sort -u | tr '\n' ' ')
    fail=1; [ "${2:-}" = --optional ] && fail=0
    if [ -z "${pkgs// /}" ]; then [ "$fail" = 1 ] && echo "test-tools: all present"; exit 0; fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
      echo "test-tools: needs root and apt-get to install: $pkgs" >&2; exit $fail
    fi
    echo "test-tools: installing $pkgs(apt, about a minute)"
    if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null; then
      echo "test-tools: installed $pkgs"
    else
      echo "test-tools: apt-get could not install $pkgs: their tests will skip, saying why" >&2; exit $fail
    fi ;;
  *) echo "usage: scripts/test-tools.sh missing|install" >&2; exit 2 ;;
esac
