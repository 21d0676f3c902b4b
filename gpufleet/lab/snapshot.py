"""The booted snapshot: a lab VM is booted once, and every lab VM of the libvirt backend starts from its saved state.

Under software emulation a Debian boot to SSH takes 60-90 s of a core (kernel ~12 s, initramfs ~24 s, systemd's
first boot the rest), and the lab started a dozen VMs per run. Now one *template* VM boots from the image, settles,
and is saved with QEMU's ``savevm`` (RAM and device state into an internal snapshot of its qcow2 overlay). A new lab
host gets a copy of that overlay and starts with ``-loadvm``: SSH answers in about 5 s. Its own identity is then
set (hostname, SSH host key, clock: ``Lab`` does it over SSH) and its NVMe controller hot-plugged.

Two QEMU 7.2 limits shape the template:

- its ``nvme`` device cannot be saved ("State blocked by non-migratable device"), so the template has the root port
  and the NVMe subsystem but no controller; a restored host gets the controller by ``device_add`` (the guest's PCIe
  hotplug enumerates it and its SR-IOV capability as a cold boot would);
- q35's built-in AHCI controller, left running by the firmware and never claimed by the guest (the image
  blacklists ``ahci``), holds a DMA address the guest's IOMMU no longer maps, and loading its state fails; the
  template loads and unloads ``ahci`` before the save, which stops the controller.

A restored host's persistent definition is its cold one (every device, no ``-loadvm``): any later power-on, reset
or reboot is a real boot. The template is kept in the image's folder, keyed by everything it depends on (the image,
the template's domain, QEMU's version, the accelerator); a change to any of them makes a new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpufleet.lab import ssh, virt
from gpufleet.lab.accel import Accel
from gpufleet.lab.config import host_uuid

Progress = Callable[[str], None]
TEMPLATE = "template"  # the template VM's host name (domain gpufleet-template while it runs)
SETTLE_S = 300  # how long the template's boot jobs may take to finish after SSH answers
SAVE_S = 600  # savevm of a few hundred MiB of RAM: seconds here, more on a busy disk

# Run in the template before the save: its boot finished, the AHCI controller stopped (see above), written data on
# disk. `systemctl is-system-running --wait` returns "degraded" too, which is fine for a lab host (it reports it).
PREPARE = "systemctl is-system-running --wait >/dev/null 2>&1; modprobe ahci && modprobe -r ahci libahci && sync"


class SnapshotError(RuntimeError):
    """The booted snapshot could not be made; the message says what failed."""


@dataclass(frozen=True)
class Booted:
    disk: Path  # the template's qcow2 overlay of the image, with the internal snapshot virt.SNAPSHOT_TAG
    seconds: float  # what making it took (0 when it was found)


def _qemu_version() -> str:
    return subprocess.run(
        [virt.QEMU, "--version"], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL
    ).stdout.splitlines()[0]


def template_host(folder: Path, ssh_port: int) -> virt.LabHost:
    return virt.LabHost(TEMPLATE, host_uuid(TEMPLATE), ssh_port, folder / "disk.qcow2", folder / "serial.log")


def key(image_recipe: str, accel: Accel) -> str:
    """What the saved state depends on: the image, the template's domain (its devices; the port and paths, which
    QEMU does not save, normalized), QEMU's version and the accelerator."""
    domain = virt.domain_xml(template_host(Path("/template"), 1), accel, boot="template")
    text = "\n".join([image_recipe, accel.name, str(accel.tcg_single_thread), _qemu_version(), domain])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def ensure(
    image_path: Path, image_recipe: str, accel: Accel, ssh_key: Path, ssh_port: int, progress: Progress
) -> Booted:
    """The booted snapshot for this image and accelerator, made first when there is none (one boot). The caller
    holds the lab lock and has libvirt running; ``ssh_port`` is a free local port for the template's SSH."""
    final = image_path.parent / f"booted-{key(image_recipe, accel)}"
    if (final / "disk.qcow2").is_file():
        return Booted(final / "disk.qcow2", 0.0)
    started = time.monotonic()
    work = final.with_name(final.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    host = template_host(work, ssh_port)
    virt.remove_domain(host)  # a template a killed run left behind
    progress("booted snapshot: booting the template VM once (later lab hosts start from its saved state)")
    try:
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(image_path), "-F", "qcow2", str(host.disk)],
            check=True,
            stdin=subprocess.DEVNULL,
        )
        virt.define(host, accel, boot="template")
        virt.virsh("start", host.domain)
        try:
            ssh.wait(ssh_key, ssh_port, 420, console=host.serial_log)
        except TimeoutError as exc:
            raise SnapshotError(f"the template VM: {exc}; console {host.serial_log}") from None
        booted_s = time.monotonic() - started
        prepared = ssh.run(ssh_key, ssh_port, PREPARE, timeout=SETTLE_S)
        if prepared.returncode:
            raise SnapshotError(f"preparing the template VM failed: {prepared.stderr.strip() or prepared.stdout}")
        said = virt.virsh("qemu-monitor-command", host.domain, "--hmp", f"savevm {virt.SNAPSHOT_TAG}", timeout=SAVE_S)
        if said.stdout.strip():  # HMP answers errors as text, success with nothing
            raise SnapshotError(f"savevm in the template VM: {said.stdout.strip()}")
    finally:
        virt.remove_domain(host)
    listed = subprocess.run(
        ["qemu-img", "snapshot", "-l", str(host.disk)], capture_output=True, text=True, check=False,
        stdin=subprocess.DEVNULL,
    ).stdout  # fmt: skip
    if virt.SNAPSHOT_TAG not in listed.split():
        raise SnapshotError(f"savevm left no snapshot {virt.SNAPSHOT_TAG!r} in {host.disk}")
    host.serial_log.unlink(missing_ok=True)
    (work / "domain.xml").unlink(missing_ok=True)
    work.rename(final)
    for old in image_path.parent.glob("booted-*"):
        if old != final:
            with contextlib.suppress(OSError):
                shutil.rmtree(old)
    seconds = time.monotonic() - started
    progress(f"booted snapshot: made in {seconds:.0f} s (the template's boot to SSH {booted_s:.0f} s)")
    return Booted(final / "disk.qcow2", seconds)


def identity_script(name: str, epoch: float) -> str:
    """What a host restored from the template runs to become ``name``: the first-boot service's work (hostname,
    own SSH host key) and the clock (a restored guest's clock resumes at the save). The machine ID stays the
    template's: journald keeps its journal under the ID it started with, and a new one written under it hid the
    journal from ``journalctl`` (tried 2026-11-28); the lab's hosts have separate user-mode networks, where a shared
    ID (DHCP's client identifier) cannot collide."""
    return (
        f"set -e; date -s @{epoch:.0f} >/dev/null; hostnamectl set-hostname {name}; "
        "rm -f /etc/ssh/ssh_host_*; ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key; "
        "systemctl reload ssh"
    )
