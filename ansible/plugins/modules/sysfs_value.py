#!/usr/bin/python
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module sysfs_value: set one sysfs attribute, idempotently, with check mode and diff."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sysfs_value
short_description: Set a sysfs attribute (hugepages per node, SR-IOV VFs, transparent hugepages) idempotently
description:
  - Reads the attribute; writes it only when it differs; reads it back and fails when the kernel did not take
    the value (for example fewer hugepages than asked, on fragmented memory).
  - In check mode reports whether it would change, and changes nothing. Supports diff.
options:
  path:
    description: The sysfs file.
    type: path
    required: true
  value:
    description: The value to set.
    type: str
    required: true
  reset_first:
    description:
      - Write C(0) before the new value when the current value is not already C(0) (the kernel refuses to change
        C(sriov_numvfs) from one non-zero value to another).
    type: bool
    default: false
  selected:
    description:
      - The file lists choices with the current one in brackets (C(always [madvise] never)); compare that one.
    type: bool
    default: false
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: 64 hugepages of 2 MiB on NUMA node 1
  sysfs_value:
    path: /sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages
    value: "64"

- name: Four VFs
  sysfs_value:
    path: /sys/bus/pci/devices/0000:81:00.0/sriov_numvfs
    value: "4"
    reset_first: true
"""

RETURN = r"""
before:
  description: The value before the task.
  returned: always
  type: str
after:
  description: The value after the task (what it would be, in check mode).
  returned: always
  type: str
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule


def current(path: str, selected: bool) -> str:
    with open(path, encoding="utf-8") as f:
        text = f.read().strip()
    if selected:
        m = re.search(r"\[([^\]]+)\]", text)
        return m.group(1) if m else text
    return text


def write(path: str, value: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(value)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "value": {"type": "str", "required": True},
            "reset_first": {"type": "bool", "default": False},
            "selected": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    path, value = module.params["path"], module.params["value"].strip()
    if not os.path.exists(path):
        module.fail_json(msg=f"{path} does not exist")
    before = current(path, module.params["selected"])
    result = {"changed": False, "before": before, "after": before, "path": path}
    if before == value:
        module.exit_json(**result)
    result.update(
        changed=True,
        after=value,
        diff={"before": before + "\n", "after": value + "\n", "before_header": path, "after_header": path},
    )
    if module.check_mode:
        module.exit_json(**result)
    try:
        if module.params["reset_first"] and before != "0":
            write(path, "0")
        write(path, value)
    except OSError as exc:
        module.fail_json(msg=f"writing {value!r} to {path}: {exc.strerror}", **result)
    after = current(path, module.params["selected"])
    if after != value:
        module.fail_json(msg=f"{path} is {after!r} after writing {value!r}: the kernel did not take it", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
