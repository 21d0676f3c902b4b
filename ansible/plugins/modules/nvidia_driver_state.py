#!/usr/bin/python
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module nvidia_driver_state: the state of a host's NVIDIA driver (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_driver_state
short_description: Read the state of the host's NVIDIA driver
description:
  - Reads the module installed for O(kernel) (C(modinfo -k)), the loaded driver (C(/proc/driver/nvidia/version)),
    whether nouveau is loaded, blacklisted and blacklisted in the initramfs, nvidia-persistenced's unit state, and
    whether the driver's packages are held. gpufleet.host.driverstate reads it; the controller judges it
    (filter C(gpufleet_driver_problems)).
  - Changes nothing; supports check mode.
options:
  kernel:
    description: The kernel whose installed module is read (the running one).
    type: str
    required: true
  module:
    description: The kernel module's file name (the driver plan's C(kernel_module), e.g. C(nvidia-current-open)).
    type: str
    required: true
  nouveau_blacklist:
    description: The modprobe.d file that blacklists nouveau; its name is looked for in the initramfs.
    type: str
    required: true
  version_package:
    description: The package whose hold (apt) keeps the driver's version.
    type: str
    default: ""
  host_root:
    description: Root of the files read (C(/proc), C(/sys), C(/boot)); C(/) on a host, a recorded tree in tests.
    type: path
    default: /
  imex_unit:
    description: The IMEX service whose state to read (C(systemctl is-enabled), C(is-active)); empty reads none.
    type: str
    default: ""
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Read the driver's state
  nvidia_driver_state:
    kernel: "{{ ansible_facts.kernel }}"
    module: "{{ __nvidia_driver.kernel_module }}"
    nouveau_blacklist: "{{ __nvidia_driver.nouveau_blacklist }}"
    version_package: "{{ __nvidia_driver.version_package }}"
  register: __state
"""

RETURN = r"""
state:
  description: kernel, module, module_version, module_license, module_error, proc_version, nouveau_loaded,
    nouveau_blacklisted, initramfs_blacklist, persistenced_enabled, persistenced_failed, persistenced_condition,
    held; with I(imex_unit) also imex_unit, imex_enabled (C(not-found) when systemctl prints nothing), imex_active.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpufleet_driverstate import read_driver_state


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kernel": {"type": "str", "required": True},
            "module": {"type": "str", "required": True},
            "nouveau_blacklist": {"type": "str", "required": True},
            "version_package": {"type": "str", "default": ""},
            "host_root": {"type": "path", "default": "/"},
            "imex_unit": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    state = read_driver_state(
        p["kernel"], p["module"], p["nouveau_blacklist"], p["version_package"], p["host_root"], p["imex_unit"]
    )
    module.exit_json(changed=False, state=state)


if __name__ == "__main__":
    main()
