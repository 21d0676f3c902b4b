#!/usr/bin/env bash
# Installs the system packages gpufleet needs on Debian/Ubuntu, then exits. Idempotent: it installs nothing
# when everything is present. Beside Python's venv, the local lab needs QEMU, libvirt (and its headers, for the
# Redfish emulator's libvirt binding), debootstrap and the disk tools (see docs/lab.md).
# Runs non-interactively (CI=true, no stdin): as root directly, otherwise with passwordless sudo; if neither is
# possible it prints the exact command to run and fails.
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

# the local lab: command -> Debian package
lab_tools=(
  "qemu-system-x86_64:qemu-system-x86" "qemu-img:qemu-utils" "virsh:libvirt-clients" "libvirtd:libvirt-daemon-system"
  "debootstrap:debootstrap" "sfdisk:fdisk" "mkfs.ext4:e2fsprogs" "ssh:openssh-client" "ssh-keygen:openssh-client"
  "pkg-config:pkg-config" "gcc:gcc"
  "xmllint:libxml2-utils"  # virt-xml-validate (libvirt-clients) runs it: the tests validate gpufleet's domain XML
  "systemd-nspawn:systemd-container"  # the lab's system containers (gpufleet/lab/container.py)
)
for entry in "${lab_tools[@]}"; do
  command -v "${entry%%:*}" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "${entry%%:*}" >/dev/null 2>&1 \
    || need+=("${entry#*:}")
done
# headers for building libvirt-python (the Redfish emulator's libvirt driver) and Python extensions
[ -e /usr/include/libvirt/libvirt.h ] || need+=(libvirt-dev)
python3 -c 'import sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' \
  2>/dev/null || need+=(python3-dev)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)

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
