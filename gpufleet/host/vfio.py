"""The host side of the ``vfio`` role: which PCI devices a selector names, whether each one's IOMMU group can go to
a VM, and binding to (or releasing from) ``vfio-pci`` through sysfs, as the kernel documents it
(Documentation/driver-api/vfio.rst, ABI ``sysfs-bus-pci``: ``driver_override``, ``drivers_probe``).

Self-contained (standard library, Python 3.8+): the Ansible module ``vfio_pci`` ships this file to hosts as a
module_utils; tests import it. Everything is read below ``root`` (``/`` on a host, a tree in tests).

Selectors (the role's ``vfio_devices``):

- a PCI address, ``0000:81:00.1``;
- a ``vendor:device`` id, ``10de:2330``: every device with that id;
- ``vfs-of:<PCI address>``: every SR-IOV virtual function of that physical function (the ones that exist now);
- ``nvidia-gpus``: every NVIDIA display or 3D controller (PCI vendor 10de, class 0x0300 or 0x0302).

A group is *viable* for a VM when every other device in it is passed through too, has no driver, is bound to a
driver VFIO accepts beside it (``pci-stub``, ``pcieport``) or is a PCI bridge: the kernel's own rule for opening a
VFIO group. A device that shares its group with anything else (no ACS between them) cannot be given to a VM
alone; :func:`group_problems` says which group and which device.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass

ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PCI_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")
VFS_OF = "vfs-of:"
NVIDIA_GPUS = "nvidia-gpus"
DRIVER = "vfio-pci"
# Drivers the kernel accepts on the other devices of a group opened by VFIO (vfio_dev_driver_allowed)
VIABLE_DRIVERS = ("vfio-pci", "pci-stub", "pcieport")
BRIDGE_CLASS = "0x0604"
DISPLAY_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers: GPUs


class VfioError(ValueError):
    """A selector that names nothing, or a device that cannot be given to a VM; the message says which."""


@dataclass(frozen=True)
class PciDevice:
    address: str
    pci_id: str  # vendor:device, lower case, no 0x
    pci_class: str  # 0x030200 as sysfs writes it
    driver: str | None
    override: str | None  # driver_override; None when unset
    iommu_group: str | None  # None while the IOMMU is off
    physfn: str | None  # the PF of a virtual function

    @property
    def is_bridge(self) -> bool:
        return self.pci_class.startswith(BRIDGE_CLASS)

    @property
    def is_display(self) -> bool:
        return self.pci_class[:6] in DISPLAY_CLASSES


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def _link_name(path: str) -> str | None:
    """The last component of a symlink's target (a driver, a group), or a recorded tree's file holding it."""
    if os.path.islink(path):
        return os.path.basename(os.readlink(path))
    return _read(path) if os.path.isfile(path) else None


def pci_root(root: str) -> str:
    return os.path.join(root, "sys/bus/pci/devices")


def read_device(root: str, address: str) -> PciDevice:
    path = os.path.join(pci_root(root), address)
    vendor, device = (_read(os.path.join(path, f)) or "0x0000" for f in ("vendor", "device"))
    override = _read(os.path.join(path, "driver_override"))
    return PciDevice(
        address=address,
        pci_id=f"{vendor[2:]}:{device[2:]}".lower(),
        pci_class=(_read(os.path.join(path, "class")) or "0x000000").lower(),
        driver=_link_name(os.path.join(path, "driver")),
        override=None if override in (None, "", "(null)") else override,
        iommu_group=_link_name(os.path.join(path, "iommu_group")),
        physfn=_link_name(os.path.join(path, "physfn")),
    )


def list_devices(root: str) -> dict[str, PciDevice]:
    base = pci_root(root)
    names = sorted(os.listdir(base)) if os.path.isdir(base) else []
    return {name: read_device(root, name) for name in names if ADDRESS.match(name)}


def iommu_active(root: str) -> bool:
    """Whether the kernel runs an IOMMU: it lists IOMMU groups (none while the IOMMU is off)."""
    groups = os.path.join(root, "sys/kernel/iommu_groups")
    return os.path.isdir(groups) and bool(os.listdir(groups))


def resolve(selectors: list[str], devices: dict[str, PciDevice]) -> tuple[list[str], list[str]]:
    """The addresses ``selectors`` name, in PCI order, each once; and the selectors that name no device now.
    Raises :class:`VfioError` for a selector that is none of the four forms."""
    chosen: set[str] = set()
    missing: list[str] = []
    for raw in selectors:
        sel = str(raw).strip().lower()
        if ADDRESS.match(sel):
            found = [sel] if sel in devices else []
        elif PCI_ID.match(sel):
            found = [a for a, d in devices.items() if d.pci_id == sel]
        elif sel.startswith(VFS_OF) and ADDRESS.match(sel[len(VFS_OF) :]):
            found = [a for a, d in devices.items() if d.physfn == sel[len(VFS_OF) :]]
        elif sel == NVIDIA_GPUS:
            found = [a for a, d in devices.items() if d.pci_id.startswith("10de:") and d.is_display]
        else:
            raise VfioError(
                f"{raw!r} is not a device selector: expected a PCI address (0000:81:00.1), a vendor:device id"
                f" (10de:2330), {VFS_OF}<PCI address> or {NVIDIA_GPUS}"
            )
        if not found:
            missing.append(str(raw))
        chosen.update(found)
    return sorted(chosen), missing


def group_members(root: str, group: str) -> list[str]:
    path = os.path.join(root, "sys/kernel/iommu_groups", group, "devices")
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def group_problems(root: str, wanted: list[str], devices: dict[str, PciDevice]) -> list[str]:
    """One line per device that would stop a passed-through device's IOMMU group from being opened: a device in the
    same group that is not passed through and runs a driver (no ACS isolation between them)."""
    problems = []
    chosen = set(wanted)
    for address in wanted:
        group = devices[address].iommu_group
        if group is None:
            problems.append(f"{address} is in no IOMMU group although the IOMMU is on: it cannot be given to a VM")
            continue
        for other in group_members(root, group):
            dev = devices.get(other) or read_device(root, other)
            if other in chosen or dev.is_bridge or dev.driver is None or dev.driver in VIABLE_DRIVERS:
                continue
            problems.append(
                f"IOMMU group {group} holds {address} (to pass through) and {other} ({dev.driver}, not passed"
                f" through): a group goes to VMs whole; pass {other} through too, or move {address} to a slot"
                " behind a port with ACS (Access Control Services)"
            )
    return problems


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(value)


def bind(root: str, device: PciDevice) -> None:
    """Bind ``device`` to vfio-pci for good: ``driver_override`` (so that no other driver takes it when it is probed
    again), unbind from its driver, probe. Raises :class:`VfioError` when the kernel did not bind it."""
    path = os.path.join(pci_root(root), device.address)
    _write(os.path.join(path, "driver_override"), DRIVER)
    if device.driver not in (None, DRIVER):
        _write(os.path.join(path, "driver", "unbind"), device.address)
    if device.driver != DRIVER:
        _write(os.path.join(root, "sys/bus/pci/drivers_probe"), device.address)
    now = read_device(root, device.address).driver
    if now != DRIVER:
        raise VfioError(
            f"{device.address}: probing with driver_override {DRIVER} left it on {now or 'no driver'}"
            " (is the vfio-pci module loaded? the kernel log says why a probe failed)"
        )


def release(root: str, device: PciDevice) -> None:
    """Give ``device`` back: clear ``driver_override``, unbind from vfio-pci, probe for its own driver."""
    path = os.path.join(pci_root(root), device.address)
    _write(os.path.join(path, "driver_override"), "\n")
    if device.driver == DRIVER:
        _write(os.path.join(path, "driver", "unbind"), device.address)
    with contextlib.suppress(OSError):  # no driver wants it: it stays unbound, as it was before
        _write(os.path.join(root, "sys/bus/pci/drivers_probe"), device.address)
