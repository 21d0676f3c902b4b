#!/usr/bin/python
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module gpu_topology: a host's NUMA/GPU/NIC topology as facts (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_topology
short_description: Discover a host's NUMA, CPU, GPU, NIC and NVSwitch topology from sysfs and procfs
description:
  - Reads only sysfs and procfs below O(host_root) and returns the topology as the fact C(gpu_topology).
  - NUMA nodes (CPUs, memory, hugepages), physical cores with their SMT siblings, GPUs (NVIDIA class 0x0300 or
    0x0302, AMD class 0x0380 or 0x1200) with the catalog model, the DRM render node and, on AMD GPUs, the compute and
    memory partition modes (current and available), NICs (Ethernet 0x0200, InfiniBand 0x0207) with
    interface names and SR-IOV totals, NVSwitches (NVIDIA class 0x0680), CPU vendor, kernel, command line.
  - A device whose numa_node is -1 is reported with numa_node null (unknown), never as node 0.
  - Fails with the file and the reason (C(path), C(msg)) when a fact cannot be read or contradicts another (a garbage
    CPU list, a FIFO or device file, a symlink loop, a device on a NUMA node the host does not have).
  - Changes nothing; supports check mode.
options:
  host_root:
    description: Root of the tree to read; C(/) on a host, a recorded tree in tests.
    type: path
    default: /
  gpu_catalog:
    description:
      - Maps C(vendor:device) PCI ids to C({model, mig}); the filter C(gpufleet_gpu_catalog) builds it from
        gpufleet's hardware catalog on the controller. GPUs missing from it are reported with model null.
    type: dict
    default: {}
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Discover the topology
  gpu_topology:
    gpu_catalog: "{{ {} | gpufleet_gpu_catalog }}"
"""

RETURN = r"""
ansible_facts:
  description: C(gpu_topology) with numa_nodes, cores, smt, gpus, nics, nvswitches, sriov_devices, cpu_vendor,
    kernel, cmdline, memory_kib.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpufleet_hostfacts import FactsError, read_host


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "host_root": {"type": "path", "default": "/"},
            "gpu_catalog": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    try:
        facts = read_host(module.params["host_root"], module.params["gpu_catalog"])
    except FactsError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    if not facts["numa_nodes"]:
        module.fail_json(msg=f"no NUMA node under {module.params['host_root']}/sys/devices/system/node")
    module.exit_json(changed=False, ansible_facts={"gpu_topology": facts})


if __name__ == "__main__":
    main()
