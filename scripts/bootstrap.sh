#!/usr/bin/env bash
# Installs the system packages gpufleet needs on Debian/Ubuntu, then exits. Idempotent: it installs nothing
# when everything is present. Runs non-interactively (CI=true, no stdin): as root directly, otherwise with
# passwordless sudo; if neither is possible it prints the exact command to run and fails.
set -euo pipefail

need=()
if ! command -v python3 >/dev/null 2>&1; then
  need+=(python3 python3-venv)
else
  if ! python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "gpufleet needs Python >= 3.11; found $(python3 --version 2>&1). Debian 12 ships 3.11." >&2
    exit 1
  fi
  # Debian splits venv/ensurepip into python3-venv: try to create a throw-away venv to find out.
  tmp=$(mktemp -d)
  if ! python3 -m venv "$tmp/probe" >/dev/null 2>&1; then
    need+=(python3-venv)
  fi
  rm -rf "$tmp"
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "gpufleet: missing ${need[*]} and this is not a Debian/Ubuntu machine; install them and re-run." >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "gpufleet: missing system packages. Run: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "==> installing system packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null
