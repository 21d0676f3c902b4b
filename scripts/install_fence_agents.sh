#!/usr/bin/env bash
# Install Debian's fence_redfish into the virtualenv (`make setup` runs this): the tests run it, as Fence Agents
# Remediation runs it on a power-cycled node, with the parameters gpufleet renders (docs/remediation.md), against a
# Redfish BMC. It comes from Debian 12's `fence-agents` package, fetched with `apt-get download` and unpacked with
# dpkg-deb (no root needed): only fence_redfish and the fencing library it imports are kept, under
# $BIN/../share/fence, with $BIN/fence_redfish running them on the virtualenv's Python (pycurl and pexpect, which the
# library imports, come from pyproject.toml's dev extra). An installed fence_redfish of the pinned version is left
# alone.
set -euo pipefail

VERSION="4.12.1-1"   # Debian 12 (bookworm) fence-agents, as `apt-cache policy fence-agents` lists it
BIN="${1:-.venv/bin}"
SHARE="$BIN/../share/fence"

if [ -x "$BIN/fence_redfish" ] && grep -qxF "# fence-agents $VERSION" "$BIN/fence_redfish" 2>/dev/null; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "==> installing fence_redfish (Debian fence-agents $VERSION) into $BIN"
. "$(dirname "$0")/debian_package.sh"
unpack_deb fence-agents "$VERSION" "$tmp"
VERSION=$(dpkg-deb -f "$tmp"/fence-agents_*.deb Version)
mkdir -p "$SHARE"
install -m 0644 "$tmp/root/usr/share/fence/fencing.py" "$SHARE/fencing.py"
install -m 0644 "$tmp/root/usr/sbin/fence_redfish" "$SHARE/fence_redfish"
cat > "$BIN/fence_redfish.new" <<WRAPPER
#!/bin/sh
# fence-agents $VERSION
# Debian's fence_redfish on the virtualenv's Python (scripts/install_fence_agents.sh)
here=\$(dirname "\$(readlink -f "\$0")")
PYTHONPATH="\$here/../share/fence\${PYTHONPATH:+:\$PYTHONPATH}" exec "\$here/python" "\$here/../share/fence/fence_redfish" "\$@"
WRAPPER
chmod 0755 "$BIN/fence_redfish.new"
mv "$BIN/fence_redfish.new" "$BIN/fence_redfish"
