"""Read the state of a host's NVIDIA driver: the module installed for a kernel, the loaded driver, nouveau,
nvidia-persistenced and the package holds. What the state should be is judged elsewhere
(:func:`gpufleet.host.driver.driver_problems`, on the controller).

Self-contained (standard library, Python 3.8+): the Ansible module ``nvidia_driver_state`` ships this file to hosts
as a module_utils, and ``gpufleet lab verify`` runs it on a host over SSH. Read-only. Files are read below ``root``
(``/`` on a host, a recorded tree in tests); the commands (``modinfo``, ``modprobe``, ``lsinitramfs``/``lsinitrd``,
``systemctl``, ``apt-mark``/``dnf``) are the host's own, found on ``PATH``:

- ``modinfo -k KERNEL -F version|license MODULE``: the module installed for the kernel (what its next boot loads)
- ``proc/driver/nvidia/version``: the loaded driver's NVRM line (version, open or proprietary modules)
- ``sys/module/nouveau``: nouveau loaded; ``modprobe --showconfig``: nouveau blacklisted
- ``lsinitramfs boot/initrd.img-KERNEL`` (Debian, Ubuntu) or ``lsinitrd boot/initramfs-KERNEL.img`` (RHEL): the
  blacklist file is in the initramfs
- ``systemctl is-enabled|is-failed|cat nvidia-persistenced.service``
- ``systemctl is-enabled|is-active IMEX_UNIT`` when the caller names the IMEX unit (host groups whose ComputeDomains
  the DRA driver runs: the unit must be masked and stopped there)
- ``apt-mark showhold`` (the version package held) or ``dnf versionlock list`` (a lock on an nvidia package)
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

PERSISTENCED = "nvidia-persistenced.service"
PERSISTENCED_CONDITION = "ConditionPathExists=/dev/nvidiactl"


def _run(argv: list[str]) -> tuple[int, str, str]:
    """A command's exit status, stdout and stderr; 127 when it is not installed."""
    if shutil.which(argv[0]) is None:
        return 127, "", f"{argv[0]}: command not found"
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False, timeout=60)
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out after 60 s"
    return done.returncode, done.stdout, done.stderr


def _read(root: str, path: str) -> str:
    try:
        with open(os.path.join(root, path.lstrip("/")), encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _modinfo(kernel: str, module: str, field: str) -> tuple[str, str]:
    rc, out, err = _run(["modinfo", "-k", kernel, "-F", field, module])
    return (out.strip(), "") if rc == 0 and out.strip() else ("", " ".join(err.split()) or f"modinfo exited {rc}")


def _initramfs_lists(root: str, kernel: str, name: str) -> bool:
    if shutil.which("lsinitramfs"):
        argv = ["lsinitramfs", os.path.join(root, "boot", f"initrd.img-{kernel}")]
    else:
        argv = ["lsinitrd", os.path.join(root, "boot", f"initramfs-{kernel}.img")]
    _, out, _ = _run(argv)
    return any(line.strip().endswith(f"modprobe.d/{name}") for line in out.splitlines())


def _held(version_package: str) -> bool:
    if shutil.which("apt-mark"):
        _, out, _ = _run(["apt-mark", "showhold"])
        return version_package in out.split()
    _, out, _ = _run(["dnf", "-q", "versionlock", "list"])
    return "nvidia" in out


def _imex(unit: str) -> dict[str, str]:
    if not unit:
        return {}
    _, enabled, _ = _run(["systemctl", "is-enabled", unit])
    _, active, _ = _run(["systemctl", "is-active", unit])
    return {"imex_unit": unit, "imex_enabled": enabled.strip() or "not-found", "imex_active": active.strip()}


def read_driver_state(
    kernel: str, module: str, nouveau_blacklist: str, version_package: str, root: str = "/", imex_unit: str = ""
) -> dict[str, Any]:
    """The driver's state for ``kernel``: ``module`` is the kernel module's file name (the driver plan's
    ``kernel_module``), ``nouveau_blacklist`` the modprobe.d file that blacklists nouveau, ``version_package`` the
    package whose hold keeps the driver's version; ``imex_unit`` (optional) the IMEX service whose state to read."""
    version, version_error = _modinfo(kernel, module, "version")
    license_, license_error = _modinfo(kernel, module, "license")
    _, showconfig, _ = _run(["modprobe", "--showconfig"])
    _, enabled, _ = _run(["systemctl", "is-enabled", PERSISTENCED])
    _, failed, _ = _run(["systemctl", "is-failed", PERSISTENCED])
    _, unit, _ = _run(["systemctl", "cat", PERSISTENCED])
    return {
        "kernel": kernel,
        "module": module,
        "module_version": version,
        "module_license": license_,
        "module_error": version_error or license_error,
        "proc_version": _read(root, "/proc/driver/nvidia/version").split("\n", 1)[0],
        "nouveau_loaded": os.path.isdir(os.path.join(root, "sys/module/nouveau")),
        "nouveau_blacklisted": "blacklist nouveau" in (line.strip() for line in showconfig.splitlines()),
        "initramfs_blacklist": _initramfs_lists(root, kernel, os.path.basename(nouveau_blacklist)),
        "persistenced_enabled": enabled.strip(),
        "persistenced_failed": failed.strip() == "failed",
        "persistenced_condition": PERSISTENCED_CONDITION in (line.strip() for line in unit.splitlines()),
        "held": _held(version_package),
        **_imex(imex_unit),
    }


def read_platform(root: str = "/") -> dict[str, str]:
    """The host's distribution as Ansible's facts name it (distribution, os_family, distribution_major_version,
    distribution_release, kernel), from ``etc/os-release`` and ``proc/sys/kernel/osrelease``."""
    fields = {}
    for line in _read(root, "/etc/os-release").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    os_id = fields.get("ID", "")
    names = {"debian": "Debian", "ubuntu": "Ubuntu", "rhel": "RedHat", "rocky": "Rocky", "almalinux": "AlmaLinux"}
    like = (fields.get("ID_LIKE", "") + " " + os_id).split()
    return {
        "distribution": names.get(os_id, os_id.capitalize()),
        "os_family": "RedHat" if {"rhel", "fedora", "centos"} & set(like) else "Debian" if "debian" in like else os_id,
        "distribution_major_version": fields.get("VERSION_ID", "").split(".")[0],
        "distribution_release": fields.get("VERSION_CODENAME", ""),
        "kernel": _read(root, "/proc/sys/kernel/osrelease"),
    }
