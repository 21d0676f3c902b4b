#!/usr/bin/python
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module vfio_pci: bind PCI devices to vfio-pci for VMs, release the ones that left the list."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vfio_pci
short_description: Bind the selected PCI devices to vfio-pci, and give back those that left the list
description:
  - Resolves the selectors (PCI address, vendor:device id, C(vfs-of:<PF address>), C(nvidia-gpus)) against
    C(/sys/bus/pci/devices); checks that each device's IOMMU group holds nothing else that runs a driver (ACS);
    binds each device to C(vfio-pci) with C(driver_override) (unbind from its driver, probe); releases the devices
    of the previous run's list that are no longer selected (override cleared, probed for their own driver); writes
    the list (one address per line) that C(gpufleet-vfio.service) binds at every boot.
  - While the IOMMU is off (no C(/sys/kernel/iommu_groups), before the reboot into C(intel_iommu=on)), nothing is
    bound now (vfio-pci refuses a device without a group) and C(deferred) lists the devices the boot service will
    bind.
  - Check mode reports what would change and changes nothing; a selector that names no device yet (VFs the sriov
    role has not created in check mode) is a warning there, an error otherwise. Supports diff (the list file).
options:
  devices:
    description: Selectors of the devices to pass through.
    type: list
    elements: str
    required: true
  host_root:
    description: The root holding C(sys/) (C(/) on a host; a fake sysfs tree in the module's tests).
    type: path
    default: /
  state_file:
    description: The list the boot service reads (and this module compares with, to release devices).
    type: path
    default: /etc/gpufleet/vfio-pci.list
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Bind the NVMe controller's first VF and all NVIDIA GPUs to vfio-pci
  vfio_pci:
    devices: ["0000:81:00.1", nvidia-gpus]
"""

RETURN = r"""
devices:
  description: The selected devices, PCI order, with their driver before the task.
  returned: always
  type: list
  elements: dict
missing:
  description: Selectors that name no device now (an error outside check mode).
  returned: always
  type: list
bound:
  description: Addresses bound to vfio-pci by this run (would be, in check mode).
  returned: always
  type: list
released:
  description: Addresses given back to their own driver (no longer selected).
  returned: always
  type: list
deferred:
  description: Addresses the boot service binds after the reboot that switches the IOMMU on.
  returned: always
  type: list
display:
  description: Whether a selected device is a GPU (VGA or 3D controller), whose driver must never load first.
  returned: always
  type: bool
"""

import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpufleet_vfio import (
    DRIVER,
    VfioError,
    bind,
    group_problems,
    iommu_active,
    list_devices,
    release,
    resolve,
)


def _previous(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip() and not line.startswith("#")]
    except OSError:
        return []


def _content(addresses: list[str]) -> str:
    head = "# written by gpufleet's vfio role: the PCI devices gpufleet-vfio.service binds to vfio-pci at boot\n"
    return head + "".join(a + "\n" for a in addresses)


def _apply(module: AnsibleModule, devices: dict, to_bind: list[str], to_release: list[str], state: dict) -> None:
    root = module.params["host_root"]
    try:
        if to_bind:
            subprocess.run(["modprobe", DRIVER], check=True, stdin=subprocess.DEVNULL, capture_output=True)
        for address in to_bind:
            bind(root, devices[address])
        for address in to_release:
            release(root, devices[address])
        os.makedirs(os.path.dirname(state["path"]), mode=0o755, exist_ok=True)
        with open(state["path"], "w", encoding="utf-8") as f:
            f.write(state["after"])
    except subprocess.CalledProcessError as exc:
        module.fail_json(msg=f"modprobe {DRIVER}: {exc.stderr.decode(errors='replace').strip()}")
    except (VfioError, OSError) as exc:
        module.fail_json(msg=str(exc))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "devices": {"type": "list", "elements": "str", "required": True},
            "host_root": {"type": "path", "default": "/"},
            "state_file": {"type": "path", "default": "/etc/gpufleet/vfio-pci.list"},
        },
        supports_check_mode=True,
    )
    root = module.params["host_root"]
    devices = list_devices(root)
    try:
        wanted, missing = resolve(module.params["devices"], devices)
    except VfioError as exc:
        module.fail_json(msg=str(exc))
    if missing and not module.check_mode:
        module.fail_json(msg=f"no PCI device matches {', '.join(missing)} (/sys/bus/pci/devices)")
    for selector in missing:
        module.warn(f"no PCI device matches {selector} yet (check mode: the VFs may not exist until a real run)")
    active = iommu_active(root)
    problems = group_problems(root, wanted, devices) if active else []
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems)
    previous = _previous(module.params["state_file"])
    to_bind = [a for a in wanted if devices[a].driver != DRIVER or devices[a].override != DRIVER] if active else []
    to_release = [
        a for a in previous if a not in wanted and a in devices and DRIVER in (devices[a].driver, devices[a].override)
    ]
    path = module.params["state_file"]
    state = {"path": path, "before": _content(previous) if os.path.exists(path) else "", "after": _content(wanted)}
    changed = bool(to_bind or to_release) or state["before"] != state["after"]
    result = {
        "changed": changed,
        "devices": [
            {"pci": a, "id": devices[a].pci_id, "driver": devices[a].driver, "iommu_group": devices[a].iommu_group}
            for a in wanted
        ],
        "missing": missing,
        "bound": to_bind,
        "released": to_release,
        "deferred": [] if active else wanted,
        "display": any(devices[a].is_display for a in wanted),
    }
    if state["before"] != state["after"]:
        result["diff"] = {
            "before": state["before"],
            "after": state["after"],
            "before_header": path,
            "after_header": path,
        }
    if changed and not module.check_mode:
        _apply(module, devices, to_bind, to_release, state)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
