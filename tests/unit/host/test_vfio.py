"""The vfio role's host side (gpufleet/host/vfio.py): selectors, IOMMU groups and the ACS check, on a fake sysfs tree
laid out as the lab VM's is (an NVMe PF with VFs behind a root port with ACS, each in its own group; the ICH9
functions of QEMU's q35 sharing one group, as `ls /sys/kernel/iommu_groups/*/devices` shows on a lab VM). Binding
itself needs a kernel: the lab test binds a VF for real (tests/lab/test_lab.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.host import vfio

# address -> (vendor, device, class, driver, group, physfn)
LAB = {
    "0000:00:00.0": ("0x8086", "0x29c0", "0x060000", None, "0", None),
    "0000:00:1f.0": ("0x8086", "0x2918", "0x060100", "lpc_ich", "4", None),
    "0000:00:1f.2": ("0x8086", "0x2922", "0x010601", "ahci", "4", None),
    "0000:00:1f.3": ("0x8086", "0x2930", "0x0c0500", None, "4", None),
    "0000:80:00.0": ("0x1b36", "0x000c", "0x060400", "pcieport", "5", None),
    "0000:81:00.0": ("0x1b36", "0x0010", "0x010802", "nvme", "6", None),
    "0000:81:00.1": ("0x1b36", "0x0010", "0x010802", None, "7", "0000:81:00.0"),
    "0000:81:00.2": ("0x1b36", "0x0010", "0x010802", "vfio-pci", "8", "0000:81:00.0"),
    "0000:17:00.0": ("0x10de", "0x2330", "0x030200", "nvidia", "9", None),
    "0000:18:00.0": ("0x10de", "0x22a3", "0x068000", "nvidia-nvswitch", "10", None),  # an NVSwitch: not a GPU
}


def tree(root: Path, devices: dict = LAB, groups: bool = True) -> Path:
    for address, (vendor, device, cls, driver, group, physfn) in devices.items():
        d = root / "sys/bus/pci/devices" / address
        d.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("device", device), ("class", cls), ("driver_override", "(null)")):
            (d / name).write_text(value + "\n")
        if driver:
            (root / "sys/bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
            (d / "driver").symlink_to(root / "sys/bus/pci/drivers" / driver)
        if physfn:
            (d / "physfn").symlink_to(root / "sys/bus/pci/devices" / physfn)
        if groups:
            g = root / "sys/kernel/iommu_groups" / group
            (g / "devices").mkdir(parents=True, exist_ok=True)
            (g / "devices" / address).symlink_to(d)
            (d / "iommu_group").symlink_to(g)
    return root


@pytest.fixture
def lab(tmp_path: Path) -> tuple[str, dict[str, vfio.PciDevice]]:
    root = str(tree(tmp_path))
    return root, vfio.list_devices(root)


def test_devices_are_read_with_their_driver_group_and_pf(lab):
    _, devices = lab
    vf = devices["0000:81:00.1"]
    assert (vf.pci_id, vf.driver, vf.iommu_group, vf.physfn, vf.override) == (
        "1b36:0010",
        None,
        "7",
        "0000:81:00.0",
        None,
    )
    assert devices["0000:80:00.0"].is_bridge and devices["0000:17:00.0"].is_display
    assert not devices["0000:18:00.0"].is_display


@pytest.mark.parametrize(
    ("selectors", "chosen", "missing"),
    [
        (["0000:81:00.1"], ["0000:81:00.1"], []),
        (["0000:81:00.1", "0000:81:00.1", "0000:81:00.7"], ["0000:81:00.1"], ["0000:81:00.7"]),
        (["1B36:0010"], ["0000:81:00.0", "0000:81:00.1", "0000:81:00.2"], []),
        (["vfs-of:0000:81:00.0"], ["0000:81:00.1", "0000:81:00.2"], []),
        (["vfs-of:0000:17:00.0"], [], ["vfs-of:0000:17:00.0"]),
        (["nvidia-gpus"], ["0000:17:00.0"], []),  # the NVSwitch (class 0x0680) is not one
    ],
)
def test_selectors_name_devices_in_pci_order_each_once(lab, selectors, chosen, missing):
    assert vfio.resolve(selectors, lab[1]) == (chosen, missing)


def test_a_selector_of_no_known_form_is_refused_with_the_forms(lab):
    with pytest.raises(vfio.VfioError, match=r"'81:00.1' is not a device selector: expected a PCI address"):
        vfio.resolve(["81:00.1"], lab[1])


def test_a_device_alone_in_its_group_or_beside_a_bridge_can_be_passed_through(lab):
    root, devices = lab
    assert vfio.group_problems(root, ["0000:81:00.1", "0000:81:00.2", "0000:17:00.0"], devices) == []


def test_a_device_sharing_its_group_with_a_device_in_use_is_refused_naming_the_group(lab):
    root, devices = lab
    problems = vfio.group_problems(root, ["0000:00:1f.2"], devices)
    # 00:1f.3 has no driver: it does not stop the group; 00:1f.0 runs lpc_ich: it does
    assert problems == [
        "IOMMU group 4 holds 0000:00:1f.2 (to pass through) and 0000:00:1f.0 (lpc_ich, not passed through): a group"
        " goes to VMs whole; pass 0000:00:1f.0 through too, or move 0000:00:1f.2 to a slot behind a port with ACS"
        " (Access Control Services)"
    ]
    assert vfio.group_problems(root, ["0000:00:1f.2", "0000:00:1f.0"], devices) == []


def test_without_iommu_groups_the_iommu_is_off_and_devices_have_no_group(tmp_path: Path):
    root = str(tree(tmp_path, groups=False))
    assert not vfio.iommu_active(root)
    assert vfio.list_devices(root)["0000:81:00.1"].iommu_group is None
    assert vfio.group_problems(root, ["0000:81:00.1"], vfio.list_devices(root)) == [
        "0000:81:00.1 is in no IOMMU group although the IOMMU is on: it cannot be given to a VM"
    ]
    assert vfio.iommu_active(str(tree(tmp_path / "on")))
