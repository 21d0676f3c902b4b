"""The lab's system containers: the lab image's Debian 12 tree booted with systemd as PID 1 under ``systemd-nspawn``.

File, unit and package effects (a config file a role writes, a unit it masks, what the driver role would install in
check mode, a role's calls to a stand-in ``nvidia-smi``) need a real Debian host with systemd, not a kernel of its own:
a container runs them at native speed where a VM under software emulation takes 20-50 times longer. Kernel effects
(the kernel command line and its reboot, hugepages per NUMA node, SR-IOV, vfio, Redfish power) stay on the VMs
(docs/lab.md lists which proof runs where).

Each container is ``<prefix>-<n>``: an overlay of the image's ``rootfs/`` (the tree its disk was made from, so
the packages are the VM hosts'), booted with ``systemd-nspawn --boot --register=no --keep-unit`` (this machine's
PID 1 need not be systemd), sharing this machine's network namespace: its sshd listens on one 127.0.0.1 port, so
Ansible reaches it like a VM host (same key, same inventory shape). ``down`` sends nspawn SIGTERM (the container's
systemd shuts down), unmounts and removes the overlay. State: ``<lab dir>/lab-<prefix>.json`` with ``"kind":
"container"``, beside the VM labs' files, so SSH ports are chosen once across both.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpufleet.lab import image as image_mod
from gpufleet.lab import ssh
from gpufleet.lab.config import lab_dir

Progress = Callable[[str], None]
KIND = "container"
BOOT_TIMEOUT = 120  # seconds from nspawn's start to SSH (about 5-10 s on an idle 2-core machine)
STOP_TIMEOUT = 60
TOOLS = {"systemd-nspawn": "systemd-container"}

# Units of the VM image that have no place in a container: the image's one-time GRUB install (it would write to
# /dev/vda), the VM's first-boot service (the BMC's SMBIOS serial as hostname), networkd (the container shares this
# machine's network namespace: the host's interfaces are not its own), sshd's socket (a first boot enables it by
# preset; it would listen on this machine's port 22 and stop ssh.service, which listens on the lab's port), and the
# consoles' gettys.
MASK = [
    "gpufleet-install-grub.service",
    "gpufleet-firstboot.service",
    "ssh.socket",
    "systemd-networkd.service",
    "systemd-networkd.socket",
    "systemd-networkd-wait-online.service",
    "console-getty.service",
    "getty@tty1.service",
]


class ContainerError(RuntimeError):
    """A container cannot be started or reached; the message says why."""


@dataclass(frozen=True)
class ContainerHost:
    name: str
    ssh_port: int

    @property
    def folder(self) -> Path:
        return lab_dir() / "containers" / self.name

    @property
    def root(self) -> Path:
        return self.folder / "root"

    @property
    def console(self) -> Path:
        """nspawn's output: the container's systemd boot messages (what a VM's serial console shows)."""
        return self.folder / "console.log"

    @property
    def pid_file(self) -> Path:
        return self.folder / "nspawn.pid"

    def pid(self) -> int | None:
        """nspawn's PID while it runs (checked against its command line, so a reused PID is not taken for it)."""
        try:
            pid = int(self.pid_file.read_text())
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, ValueError):
            return None
        return pid if Path(argv[0]).name == "systemd-nspawn" and str(self.root) in argv else None


def missing_tools() -> dict[str, str]:
    return {tool: pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None}


def start(host: ContainerHost, rootfs: Path, progress: Progress) -> float:
    """Boot ``host`` from ``rootfs`` (an overlay on it, or a copy where overlayfs cannot be mounted); returns the
    seconds until its sshd answers."""
    if missing := missing_tools():
        raise ContainerError(
            f"the lab's containers need {', '.join(missing)}: apt-get install {' '.join(sorted(set(missing.values())))}"
            " (make setup installs it)"
        )
    if host.pid() is not None:
        return 0.0
    _remove_tree(host)
    host.folder.mkdir(parents=True)
    how = _mount_root(host, rootfs)
    _customize(host)
    started = time.monotonic()
    with host.console.open("w") as log:
        proc = subprocess.Popen(
            [
                "systemd-nspawn", "--quiet", "--boot", "--directory", str(host.root), "--machine", host.name,
                "--register=no", "--keep-unit", "--resolv-conf=copy-host", "--timezone=off", "--link-journal=no",
                "--console=read-only",
            ],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    host.pid_file.write_text(f"{proc.pid}\n")
    progress(f"{host.name}: system container started ({how} of the image's tree, nspawn pid {proc.pid})")
    try:
        ssh.wait(image_mod.ssh_key(), host.ssh_port, BOOT_TIMEOUT, console=host.console)
    except TimeoutError as exc:
        tail = ssh.console_tail(host.console)
        stop(host, progress)
        raise ContainerError(f"{host.name}: {exc}; its console ended:\n{tail}") from None
    if proc.poll() is not None:
        raise ContainerError(f"{host.name}: systemd-nspawn exited ({proc.returncode}); see {host.console}")
    return time.monotonic() - started


def stop(host: ContainerHost, progress: Progress) -> None:
    """Shut ``host`` down (SIGTERM to nspawn: the container's systemd stops its units), then remove its files."""
    pid = host.pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while host.pid() is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        if host.pid() is not None:
            progress(f"{host.name}: not down after {STOP_TIMEOUT} s; killing nspawn")
            os.killpg(pid, signal.SIGKILL)
            time.sleep(1)
        progress(f"{host.name}: system container stopped")
    _remove_tree(host)


def _mount_root(host: ContainerHost, rootfs: Path) -> str:
    """The container's root: an overlayfs over the image's tree (seconds), else a copy of it."""
    for sub in ("upper", "work", "root"):
        (host.folder / sub).mkdir()
    options = f"lowerdir={rootfs},upperdir={host.folder / 'upper'},workdir={host.folder / 'work'}"
    mounted = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(host.root)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if mounted.returncode == 0:
        return "an overlay"
    host.root.rmdir()
    subprocess.run(
        ["cp", "-a", "--reflink=auto", str(rootfs), str(host.root)],
        stdin=subprocess.DEVNULL, check=True, timeout=600,
    )  # fmt: skip
    return f"a copy (overlayfs: {mounted.stderr.strip() or 'mount failed'})"


def _customize(host: ContainerHost) -> None:
    root = host.root
    for unit in MASK:
        link = root / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    (root / "etc/fstab").write_text("# a lab system container: nspawn mounts its file systems\n")
    (root / "etc/hostname").write_text(f"{host.name}\n")
    (root / "etc/ssh/sshd_config.d/20-lab-container.conf").write_text(
        f"# the container shares this machine's network: its sshd listens on the lab's port only\n"
        f"Port {host.ssh_port}\nListenAddress 127.0.0.1\n"
    )
    key = root / "etc/ssh/ssh_host_ed25519_key"
    for old in (key, key.with_suffix(".pub")):
        old.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.name, "-f", str(key)],
        stdin=subprocess.DEVNULL, check=True, timeout=60,
    )  # fmt: skip


def _remove_tree(host: ContainerHost) -> None:
    if not host.folder.exists():
        return
    if os.path.ismount(host.root):
        subprocess.run(
            ["umount", "--lazy", str(host.root)], stdin=subprocess.DEVNULL, check=False, timeout=60
        )  # fmt: skip
    shutil.rmtree(host.folder, ignore_errors=True)
