"""The lab's disk image: Debian 12 that boots from its own disk through GRUB.

Built once and cached under ``<lab dir>/images/<recipe hash>/``: ``debootstrap`` into a folder, a partitioned raw
disk filled with ``mkfs.ext4 -E offset=... -d`` (no loop devices, no mounts), qcow2, then one boot with the kernel
passed directly during which the guest installs GRUB on its disk and powers off. The folder is kept beside the disk
(``rootfs/``): the lab's system containers boot the same tree (container.py). The recipe hash covers the
package list, the customization in this file and the lab's SSH key, so a change to any of them rebuilds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpufleet.lab import accel
from gpufleet.lab.config import lab_dir

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = [
    "linux-image-amd64", "systemd-sysv", "udev", "dbus", "kmod", "initramfs-tools", "procps", "iproute2",
    "openssh-server", "python3", "sudo", "grub-pc", "numactl", "pciutils", "nvme-cli", "irqbalance",
    "python3-yaml",  # read by the lab's GPU test double (tests/lab/standins/fake_nvidia.py), as mig-parted reads YAML
    # Ansible's apt module (Debian's standard install has it, through apt-listchanges): the module installs it when
    # missing and then restarts Python, which the Mitogen strategy cannot (the roles install it first themselves)
    "python3-apt",
]  # fmt: skip
RECIPE_VERSION = 3  # bump when the customization below changes in a way the hash would not see (3: keeps rootfs/)
TOOLS = {
    "debootstrap": "debootstrap",
    "sfdisk": "fdisk",
    "mkfs.ext4": "e2fsprogs",
    "qemu-img": "qemu-utils",
    "qemu-system-x86_64": "qemu-system-x86",
}

Progress = Callable[[str], None]


class ImageError(RuntimeError):
    """The image cannot be built; the message says what is missing or what failed."""


@dataclass(frozen=True)
class Image:
    path: Path  # base.qcow2
    kernel: Path
    initrd: Path
    recipe: str
    built_now: bool
    seconds: float

    @property
    def rootfs(self) -> Path:
        """The debootstrapped tree the disk was made from, kept for the lab's system containers (container.py)."""
        return self.path.parent / "rootfs"


GRUB_SERVICE = """\
[Unit]
Description=gpufleet lab image: a small initramfs, GRUB on the boot disk, then power off
ConditionPathExists=!/var/lib/gpufleet/grub-installed
After=local-fs.target

[Service]
Type=oneshot
ExecStart=/usr/sbin/update-initramfs -u -k all
ExecStart=/usr/sbin/grub-install /dev/vda
ExecStart=/usr/sbin/update-grub
ExecStart=/usr/bin/mkdir -p /var/lib/gpufleet
ExecStart=/usr/bin/touch /var/lib/gpufleet/grub-installed
ExecStart=/usr/bin/sh -c 'echo uninitialized > /etc/machine-id'
ExecStart=/usr/bin/echo gpufleet-image-ready
ExecStart=/usr/bin/systemctl --no-block poweroff
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
"""

FIRSTBOOT_SERVICE = """\
[Unit]
Description=gpufleet lab host: own SSH host keys and hostname (from the BMC's SMBIOS serial)
ConditionFirstBoot=yes
Before=ssh.service
After=local-fs.target

[Service]
Type=oneshot
ExecStart=/usr/bin/sh -c 'rm -f /etc/ssh/ssh_host_* && ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key'
ExecStart=/usr/bin/sh -c 'n=$(cat /sys/class/dmi/id/product_serial); [ -z "$n" ] || hostnamectl set-hostname "$n"'

[Install]
WantedBy=multi-user.target
"""

# Drivers udev would load at every boot for devices of QEMU's q35 machine that a lab host never uses (the SATA
# controller, watchdog, SMBus, PC speaker...), KVM (the lab's CPU is emulated) and wireless: a module load takes
# seconds under emulation, and the boot's services wait behind them.
MODPROBE_BLACKLIST = "".join(
    f"blacklist {m}\n"
    for m in ["ahci", "libahci", "iTCO_wdt", "iTCO_vendor_support", "i2c_i801", "lpc_ich", "intel_pmc_bxt",
              "pcspkr", "serio_raw", "cfg80211", "kvm", "kvm_amd", "kvm_intel"]
)  # fmt: skip

FILES = {
    "etc/fstab": "/dev/vda1 / ext4 errors=remount-ro 0 1\n",
    "etc/hostname": "lab\n",
    "etc/resolv.conf": "nameserver 10.0.2.3\n",  # QEMU user networking's DNS
    "etc/systemd/network/20-lab.network": "[Match]\nName=en*\n\n[Network]\nDHCP=yes\n",
    "etc/systemd/system/gpufleet-install-grub.service": GRUB_SERVICE,
    # An initramfs with only what mounts the root disk (rebuilt at the image's first boot): with Debian's default
    # MODULES=most it is 35 MB, and its udev loads every storage driver before the root is mounted (10-20 s of
    # each boot under emulation). Real hosts keep MODULES=most; the roles never depend on it.
    # nvme (which MODULES=most includes too): the driver of the SR-IOV device's PF, bound before userspace, so that
    # gpufleet-sriov.service makes the VFs at once instead of waiting for udev to load it (~10 s of each reboot).
    "etc/initramfs-tools/conf.d/10-lab.conf": "MODULES=list\n",
    "etc/initramfs-tools/modules": "virtio_pci\nvirtio_blk\next4\nnvme\n",
    # one Ed25519 host key per host: ssh-keygen -A also makes an RSA key, ~20 s of a first boot under emulation
    "etc/ssh/sshd_config.d/10-lab-hostkey.conf": "HostKey /etc/ssh/ssh_host_ed25519_key\n",
    "etc/systemd/system/gpufleet-firstboot.service": FIRSTBOOT_SERVICE,
    "etc/modprobe.d/gpufleet-lab.conf": MODPROBE_BLACKLIST,
    # tsc=reliable: QEMU's emulated CPU (TCG) does not announce a constant TSC, so the kernel marks the TSC unstable
    # and reads the time from the emulated HPET, an MMIO access that takes QEMU's global lock: every clock read of
    # every vCPU then serializes the VM. With the TSC (derived from the host's clock, one for all vCPUs) a reboot to
    # SSH took 54 s instead of 127 s. Under KVM the kernel uses kvm-clock either way.
    # fsck.mode=skip: the initramfs checked the root file system at every boot, 20-45 s of a reboot under emulation
    # with another VM booting beside it; a lab host's disk is a throw-away overlay of the image.
    # nokaslr: a lab node has only 3-4 GiB, and a kernel image placed at a random physical address (KASLR) can take
    # the last free aligned GiB of a node, so that the node's boot-time 1 GiB page silently goes to the other node
    # (seen on about one boot in four). Real GPU hosts have hundreds of GiB per node and keep KASLR.
    # no_timer_check: the kernel tests at boot that the timer interrupt arrives through the (interrupt-remapped)
    # IO-APIC within a few ticks, and panics when it does not ("timer doesn't work through Interrupt-remapped
    # IO-APIC"). Under software emulation on a loaded machine the vCPU can be descheduled past that window: a lab
    # host panicked at 0.06 s of its boot (2026-11-27, load 10 on 2 cores) and stayed down until a timeout, as a
    # Molecule reboot on CI had. The parameter skips the test (kernel-parameters.txt: "Disables the code which tests
    # for broken timer IRQ sources"), as cloud images for VMs commonly do; the lab's timer works.
    "etc/default/grub.d/10-lab-console.cfg": (
        'GRUB_TIMEOUT=0\nGRUB_CMDLINE_LINUX_DEFAULT="console=ttyS0,115200 nokaslr tsc=reliable fsck.mode=skip'
        ' no_timer_check"\n'
        'GRUB_TERMINAL="serial console"\nGRUB_SERIAL_COMMAND="serial --speed=115200"\n'
        # update-grub without the recovery entry, nor the Xen, os-prober and UEFI firmware scripts (GRUB_NOEXEC):
        # the roles run the real update-grub at each kernel-argument change (several times a lab run), and it took
        # 16-20 s with them under emulation against 11-13 s without (2026-11-28, one host alone, three runs each)
        "GRUB_DISABLE_RECOVERY=true\n"
    ),
}
# /etc/grub.d scripts a lab host never needs (no Xen, no other OS, BIOS boot): a script without its executable bit
# is skipped (grub-mkconfig runs only the executable ones, /etc/grub.d/README)
GRUB_NOEXEC = ["20_linux_xen", "30_os-prober", "30_uefi-firmware"]
# systemd-firstboot would ask for a locale and time zone on the console of each new host: the lab sets them
MASK = ["systemd-firstboot.service"]
# not needed on a lab host and seconds of every boot under emulation: ext4 snapshot scrubbing, NVMe-over-Fabrics
MASK += ["e2scrub_reap.service", "nvmf-autoconnect.service"]
# modules systemd loads by name at boot for features a lab host does not use (DRM consoles, EFI, device-mapper)
MASK += ["modprobe@drm.service", "modprobe@efi_pstore.service", "modprobe@dm_mod.service"]
# Daily timers: a host restored from the booted snapshot finds its clock hours past their next run and starts them
# at once. apt-daily-upgrade then took 10.8 s of guest CPU right after each restore, beside the scenario's first
# playbook (2026-11-28, journal of a restored host), and apt's jobs hold the dpkg lock the roles' apt tasks need.
# A lab host lives minutes; its packages come from the image.
DAILY_TIMERS = [
    "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer", "fstrim.timer"
]  # fmt: skip
MASK += DAILY_TIMERS
ENABLE = {
    "multi-user.target.wants": [
        "/lib/systemd/system/systemd-networkd.service",
        "/etc/systemd/system/gpufleet-install-grub.service",
        "/etc/systemd/system/gpufleet-firstboot.service",
    ]
}


def ssh_key() -> Path:
    """The lab-only SSH key (created once)."""
    key = lab_dir() / "id_ed25519"
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-lab", "-f", str(key)],
            check=True,
            stdin=subprocess.DEVNULL,
        )
    return key


def recipe_hash() -> str:
    recipe = {
        "suite": SUITE,
        "mirror": MIRROR,
        "packages": PACKAGES,
        "files": FILES,
        "enable": ENABLE,
        "mask": MASK,
        "grub_noexec": GRUB_NOEXEC,
        "version": RECIPE_VERSION,
        "key": ssh_key().with_suffix(".pub").read_text().split()[1],
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def missing_tools() -> dict[str, str]:
    return {tool: pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None}


def ensure_image(progress: Progress = print, force: bool = False) -> Image:
    """The cached image, built first if its recipe changed (or ``force``)."""
    recipe = recipe_hash()
    final = lab_dir() / "images" / recipe
    if (final / "base.qcow2").exists() and (final / "rootfs").is_dir() and not force:
        return Image(final / "base.qcow2", final / "vmlinuz", final / "initrd.img", recipe, False, 0.0)
    missing = missing_tools()
    if missing:
        raise ImageError(
            "cannot build the lab image, missing "
            + ", ".join(missing)
            + f": apt-get install {' '.join(sorted(set(missing.values())))} (make setup installs them)"
        )
    started = time.monotonic()
    work = lab_dir() / f"build-{recipe}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rootfs = work / "rootfs"
    progress(f"debootstrap Debian {SUITE} (packages cached in {lab_dir() / 'debs'})")
    debs = lab_dir() / "debs"
    debs.mkdir(exist_ok=True)
    _run(
        ["debootstrap", "--variant=minbase", f"--cache-dir={debs}", "--include=" + ",".join(PACKAGES),
         SUITE, str(rootfs), MIRROR],
        work / "debootstrap.log", progress,
    )  # fmt: skip
    progress("customizing the root filesystem")
    _customize(rootfs)
    staging = work / "image"
    staging.mkdir()
    kernel = sorted((rootfs / "boot").glob("vmlinuz-*"))[-1]
    initrd = sorted((rootfs / "boot").glob("initrd.img-*"))[-1]
    shutil.copy2(kernel, staging / "vmlinuz")
    shutil.copy2(initrd, staging / "initrd.img")
    progress("assembling the disk (sfdisk, mkfs.ext4 -d, qcow2)")
    raw = work / "disk.raw"
    size = 8 * 1024**3
    with raw.open("wb") as f:
        f.truncate(size)
    subprocess.run(
        ["sfdisk", "-q", str(raw)], input="label: dos\nstart=2048, type=83, bootable\n", text=True, check=True
    )
    fs_kib = (size - 1024 * 1024) // 1024
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-L", "labroot", "-E", "offset=1048576", "-d", str(rootfs), str(raw), f"{fs_kib}k"],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    subprocess.run(
        ["qemu-img", "convert", "-O", "qcow2", str(raw), str(staging / "base.qcow2")],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    raw.unlink()
    rootfs.rename(staging / "rootfs")  # the same tree, booted as a system container (container.py)
    mode = accel.detect(staging / "vmlinuz")
    progress(f"first boot ({mode.name}): the guest installs GRUB on its disk, then powers off")
    _first_boot(staging, mode, work / "first-boot.log")
    final.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    seconds = time.monotonic() - started
    (final / "recipe.json").write_text(
        json.dumps({"recipe": recipe, "seconds": round(seconds, 1), "built": time.time()})
    )
    shutil.rmtree(work, ignore_errors=True)
    for old in (lab_dir() / "images").iterdir():
        if old.name != recipe:
            shutil.rmtree(old, ignore_errors=True)
    return Image(final / "base.qcow2", final / "vmlinuz", final / "initrd.img", recipe, True, seconds)


def _run(cmd: list[str], log: Path, progress: Progress) -> None:
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL
        )
        assert proc.stdout is not None
        last = time.monotonic()
        for line in proc.stdout:
            out.write(line)
            if time.monotonic() - last > 10 and line.startswith("I: "):
                progress("  " + line.strip())
                last = time.monotonic()
        if proc.wait():
            raise ImageError(f"{cmd[0]} failed (exit {proc.returncode}); see {log}")


def _customize(rootfs: Path) -> None:
    for rel, content in FILES.items():
        path = rootfs / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            path.unlink()
        path.write_text(content)
    for target, units in ENABLE.items():
        wants = rootfs / "etc/systemd/system" / target
        wants.mkdir(parents=True, exist_ok=True)
        for unit in units:
            link = wants / Path(unit).name
            if not link.exists():
                link.symlink_to(unit)
    for unit in MASK:
        link = rootfs / "etc/systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    for script in GRUB_NOEXEC:
        (rootfs / "etc/grub.d" / script).chmod(0o644)
    ssh = rootfs / "root/.ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    (ssh / "authorized_keys").write_text(ssh_key().with_suffix(".pub").read_text())
    (ssh / "authorized_keys").chmod(0o600)
    (rootfs / "etc/machine-id").write_text("uninitialized\n")
    subprocess.run(["chroot", str(rootfs), "apt-get", "clean"], check=True, stdin=subprocess.DEVNULL)
    shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)


def _first_boot(staging: Path, mode: accel.Accel, log: Path) -> None:
    cmd = [
        "qemu-system-x86_64", "-machine", "q35", *mode.qemu_args, "-smp", "2", "-m", "1024",
        "-nographic", "-no-reboot", "-nic", "none",
        "-kernel", str(staging / "vmlinuz"), "-initrd", str(staging / "initrd.img"),
        "-append", "root=/dev/vda1 rw console=ttyS0 panic=10 tsc=reliable",
        "-drive", f"file={staging / 'base.qcow2'},if=virtio,format=qcow2",
    ]  # fmt: skip
    with log.open("w") as out:
        try:
            subprocess.run(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=900, check=False
            )
        except subprocess.TimeoutExpired:
            raise ImageError(f"the image's first boot did not finish in 15 minutes; see {log}") from None
    text = log.read_text(errors="replace")
    if "gpufleet-image-ready" not in text:
        raise ImageError(f"the image's first boot did not install GRUB; see {log}")
