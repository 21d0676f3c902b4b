#!/usr/bin/env bash
# Install promtool into the virtualenv's bin (`make setup` runs this): the tests check gpufleet's generated alerting
# rules with `promtool check rules` and run their unit tests with `promtool test rules` (docs/monitoring.md).
# promtool comes from Debian 12's `prometheus` package, fetched with `apt-get download` and unpacked with dpkg-deb
# (no root needed): only its /usr/bin/promtool is kept, so no Prometheus service is installed or started. An
# installed promtool of the pinned version is left alone.
set -euo pipefail

VERSION="2.42.0+ds-5+deb12u1"   # Debian 12 (bookworm) prometheus, as `apt-cache policy prometheus` lists it
BIN="${1:-.venv/bin}"

if [ -x "$BIN/promtool" ] && "$BIN/promtool" --version 2>/dev/null </dev/null | grep -qF "$VERSION"; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
  echo "gpufleet: promtool is needed by the monitoring tests; install Prometheus's promtool $VERSION into $BIN" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "==> installing promtool (Debian prometheus $VERSION) into $BIN"
if ! (cd "$tmp" && timeout 300 apt-get download -q "prometheus=$VERSION" </dev/null >/dev/null 2>"$tmp/err"); then
  # a Debian point release replaces the package and its archive drops the old version: take bookworm's current one
  if (cd "$tmp" && timeout 300 apt-get download -q prometheus </dev/null >/dev/null 2>>"$tmp/err"); then
    echo "gpufleet: prometheus $VERSION is no longer offered; installing $(dpkg-deb -f "$tmp"/prometheus_*.deb Version) instead" >&2
  else
    echo "gpufleet: apt-get download prometheus=$VERSION failed: $(tail -1 "$tmp/err")" >&2
    echo "  (run apt-get update first, or install promtool $VERSION into $BIN yourself)" >&2
    exit 1
  fi
fi
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
install -m 0755 "$tmp/root/usr/bin/promtool" "$BIN/promtool"
