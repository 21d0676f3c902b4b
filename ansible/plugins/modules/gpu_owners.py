#!/usr/bin/python
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module gpu_owners: who owns the host's NVIDIA driver and who advertises its GPUs (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_owners
short_description: Read which components own the host's NVIDIA driver and advertise its GPUs
description:
  - Reads what each owner leaves on the host (gpufleet.host.owners, docs/kubernetes.md), that is the host's NVIDIA
    module for O(kernel) in C(modules.dep), the GPU Operator's driver root mounted at C(/run/nvidia/driver) or its
    C(/run/nvidia/nvidia-driver.pid), the device plugin's C(nvidia-*.sock) under the kubelet's C(device-plugins/),
    the DRA kubelet plugin's C(gpu.nvidia.com-reg.sock) under its C(plugins_registry/). The controller judges it
    against the host group's plan (filter C(gpufleet_owner_conflicts)).
  - Changes nothing; supports check mode.
options:
  kernel:
    description: The running kernel, whose modules.dep lists the host's driver module.
    type: str
    required: true
  host_root:
    description: Root of the files read; C(/) on a host, a recorded tree in tests.
    type: path
    default: /
  kubelet_dir:
    description: The kubelet's root directory (its C(--root-dir)); default C(/var/lib/kubelet).
    type: path
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Read who owns the driver and advertises the GPUs
  gpu_owners:
    kernel: "{{ ansible_facts.kernel }}"
  register: __owners
"""

RETURN = r"""
owners:
  description: "{driver: [{owner, evidence}], advertiser: [{owner, evidence}]}: owner host or gpu-operator (driver),
    device-plugin or dra (advertiser); evidence the host paths that show it."
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpufleet_owners import KUBELET_DIR, read_owners


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kernel": {"type": "str", "required": True},
            "host_root": {"type": "path", "default": "/"},
            "kubelet_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(changed=False, owners=read_owners(p["host_root"], p["kernel"], p["kubelet_dir"] or KUBELET_DIR))


if __name__ == "__main__":
    main()
