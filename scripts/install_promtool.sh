#!/usr/bin/env bash
# Install promtool and the prometheus server binary into the virtualenv's bin (`make setup` runs this): the tests
# check gpufleet's generated alerting rules with `promtool check rules` and run their unit tests with `promtool test
# rules` (docs/monitoring.md); the rightsize tests build a TSDB with `promtool tsdb create-blocks-from openmetrics`
# and start `prometheus` on 127.0.0.1 over it (docs/rightsize.md). Both come from Debian 12's `prometheus` package,
# fetched with `apt-get download` and unpacked with dpkg-deb (no root needed): only the two binaries are kept, so no
# Prometheus service is installed or started. Installed binaries of the pinned version are left alone.
set -euo pipefail

VERSION="2.42.0+ds-5+deb12u1"   # Debian 12 (bookworm) prometheus, as `apt-cache policy prometheus` lists it
BIN="${1:-.venv/bin}"

if [ -x "$BIN/promtool" ] && "$BIN/promtool" --version 2>/dev/null </dev/null | grep -qF "$VERSION" \
  && [ -x "$BIN/prometheus" ] && "$BIN/prometheus" --version 2>/dev/null </dev/null | grep -qF "$VERSION"; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "==> installing promtool and prometheus (Debian prometheus $VERSION) into $BIN"
. "$(dirname "$0")/debian_package.sh"
unpack_deb prometheus "$VERSION" "$tmp"
install -m 0755 "$tmp/root/usr/bin/promtool" "$BIN/promtool"
install -m 0755 "$tmp/root/usr/bin/prometheus" "$BIN/prometheus"
