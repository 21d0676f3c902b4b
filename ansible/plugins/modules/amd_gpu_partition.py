#!/usr/bin/python
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module amd_gpu_partition: read and set AMD Instinct GPUs' compute and memory partitions through sysfs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: amd_gpu_partition
short_description: Read and set AMD Instinct GPUs' compute and memory partition modes through sysfs
description:
  - Reads every AMD GPU below O(sysfs_root) (C(bus/pci/devices/*), vendor 0x1002, class 0x0380 or 0x1200; SR-IOV
    virtual functions left out) in PCI address order, with its C(current_compute_partition),
    C(available_compute_partition), C(current_memory_partition) and C(available_memory_partition)
    (gpufleet.host.hostfacts.amd_gpu_partitions), and plans each GPU's modes - O(memory) for all, O(groups) applied
    in order to the GPUs left after removing O(skipped_gpus).
  - Refuses before any change a plan the host cannot take - a GPU without partition files, groups that do not assign
    exactly the GPUs left, a mode a GPU does not offer (its available_* file) - with the GPU named.
  - O(step=read) changes nothing and returns the plan; O(step=memory) writes the memory mode into each planned GPU's
    C(current_memory_partition) that differs (the kernel only records it - a driver reload applies it, in an XGMI
    hive to the whole hive); O(step=compute) writes the compute mode into each planned GPU's
    C(current_compute_partition) that differs (the kernel switches at once, or refuses with EINVAL), then reads it
    back. Writes go only to the GPUs' own PCI directories (the primary partition's). Matching values are not written.
  - Supports check mode (reports what it would write) and diff.
options:
  sysfs_root:
    description: Root of sysfs; C(/sys) on a host, a stand-in tree in tests.
    type: path
    default: /sys
  memory:
    description: The memory (NPS) partition mode of every GPU; null leaves memory modes as they are.
    type: str
    choices: [NPS1, NPS2, NPS4]
  groups:
    description:
      - Compute modes, each C({compute, gpus}) with C(gpus) a count or C(all) (the GPUs left), applied in order to
        the host's AMD GPUs sorted by PCI address after removing O(skipped_gpus).
    type: list
    elements: dict
    default: []
  skipped_gpus:
    description: Indexes into the sorted GPUs that are left as they are.
    type: list
    elements: int
    default: []
  step:
    description: What to do - read (plan only), memory (write the memory requests) or compute (write compute modes).
    type: str
    choices: [read, memory, compute]
    default: read
  assume_reloaded:
    description:
      - For O(step=compute) in check mode after a memory change - compare against the compute modes the driver sets
        at its reload (O(reload_compute)) instead of the current ones, which the reload would change.
    type: bool
    default: false
  reload_compute:
    description: The compute mode the driver chooses at load for each memory mode (O(assume_reloaded)).
    type: dict
    default: {}
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Plan CPX on every GPU in NPS4
  amd_gpu_partition:
    memory: NPS4
    groups: [{compute: CPX, gpus: all}]
  register: partitions

- name: Set the compute modes
  amd_gpu_partition:
    memory: NPS4
    groups: [{compute: CPX, gpus: all}]
    step: compute
"""

RETURN = r"""
gpus:
  description: >-
    Every AMD GPU in PCI order - index, pci, device, compute, memory, available_compute, available_memory, skipped,
    want_compute, want_memory (null for skipped GPUs, and want_memory null when memory is not planned).
  returned: always
  type: list
memory_changes:
  description: The PCI addresses of the planned GPUs whose memory mode differs from the plan (before this step).
  returned: always
  type: list
compute_changes:
  description: The PCI addresses of the planned GPUs whose compute mode differs from the plan (before this step).
  returned: always
  type: list
written:
  description: What this step wrote (or would write, in check mode) - C({pci, file, before, after}).
  returned: always
  type: list
"""

import errno
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpufleet_hostfacts import PARTITION_FILES, FactsError, amd_gpu_partitions


class PlanError(ValueError):
    """A plan the host's GPUs cannot take."""


def _label(gpu: dict) -> str:
    return f"GPU {gpu['index']} ({gpu['pci']})"


def plan(gpus: list, memory: str | None, groups: list, skipped: list) -> list:
    """Each GPU (PCI order) with its planned modes; raises PlanError naming what cannot work."""
    if not gpus:
        raise PlanError("no AMD GPU found (PCI vendor 0x1002, class 0x0380 or 0x1200)")
    bad = [i for i in skipped if not 0 <= i < len(gpus)]
    if bad:
        raise PlanError(f"skipped_gpus names GPU {bad[0]}, but the host has {len(gpus)} AMD GPUs (0-{len(gpus) - 1})")
    out = []
    for i, gpu in enumerate(gpus):
        part = gpu["partition"]
        if part is None or part["compute"] is None or (memory and part["memory"] is None):
            raise PlanError(
                f"GPU {i} ({gpu['pci']}) offers no partition files (current_compute_partition,"
                " current_memory_partition): is the amdgpu driver loaded, and is it a GPU with partitions?"
            )
        out.append({"index": i, **{k: v for k, v in gpu.items() if k != "partition"}, **part, "skipped": i in skipped})
    planned = [g for g in out if not g["skipped"]]
    modes: list = []
    for n, group in enumerate(groups):
        count = len(planned) - len(modes) if group.get("gpus", "all") == "all" else int(group["gpus"])
        if count < 1:
            raise PlanError(f"groups[{n}] assigns no GPU ({group.get('gpus')!r}; 'all' takes the GPUs left)")
        modes += [str(group["compute"]).upper()] * count
        if len(modes) > len(planned):
            raise PlanError(
                f"groups[{n}] asks for {count} GPUs where {len(planned) - len(modes) + count} are left"
                f" ({len(gpus)} AMD GPUs, {len(skipped)} skipped)"
            )
    if len(modes) != len(planned):
        raise PlanError(
            f"the groups assign {len(modes)} GPUs, but the host has {len(planned)} to assign ({len(gpus)} AMD GPUs,"
            f" {len(skipped)} skipped): every GPU is in a group or skipped"
        )
    for gpu in out:
        gpu["want_compute"] = None if gpu["skipped"] else modes[planned.index(gpu)]
        gpu["want_memory"] = memory if memory and not gpu["skipped"] else None
        if gpu["want_compute"] and gpu["want_compute"] not in gpu["available_compute"]:
            raise PlanError(
                f"{_label(gpu)} offers compute partitions {', '.join(gpu['available_compute']) or 'none'}, not"
                f" {gpu['want_compute']}"
            )
        if gpu["want_memory"] and gpu["want_memory"] not in gpu["available_memory"]:
            raise PlanError(
                f"{_label(gpu)} offers memory partitions {', '.join(gpu['available_memory']) or 'none'}, not"
                f" {gpu['want_memory']}"
            )
    return out


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(value + "\n")


def _why(exc: OSError, value: str) -> str:
    """The kernel's refusal in words (amdgpu_gfx.c, amdgpu_gmc.c: EINVAL for a mode the GPU does not take, EPERM
    during a reset or on a virtual function)."""
    hints = {
        errno.EINVAL: f"the GPU does not take {value} (a mode it does not offer, or one that does not run with its"
        " memory partition)",
        errno.EPERM: "the GPU is resetting, or this is an SR-IOV virtual function",
        errno.EBUSY: "the GPU is busy: stop the processes that use it",
    }
    hint = hints.get(exc.errno or 0)
    return f"{exc.strerror or exc}" + (f": {hint}" if hint else "")


def apply(module: AnsibleModule, gpus: list, step: str, root: str) -> list:
    """Write the step's mode where it differs; returns {pci, file, before, after} for each write."""
    key, name = ("memory", PARTITION_FILES["memory"]) if step == "memory" else ("compute", PARTITION_FILES["compute"])
    written = []
    for gpu in gpus:
        want = gpu[f"want_{key}"]
        if want is None or gpu[key] == want:
            continue
        path = os.path.join(root, "bus/pci/devices", gpu["pci"], name)
        written.append({"pci": gpu["pci"], "file": path, "before": gpu[key], "after": want})
        if module.check_mode:
            continue
        try:
            _write(path, want)
        except OSError as exc:
            module.fail_json(msg=f"{_label(gpu)}: writing {want} to {path} failed: {_why(exc, want)}", written=written)
        if step == "compute":
            with open(path, encoding="utf-8") as f:
                now = f.read().strip().upper()
            if now != want:
                module.fail_json(msg=f"{_label(gpu)}: {path} reads {now} after writing {want}", written=written)
    return written


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "memory": {"type": "str", "choices": ["NPS1", "NPS2", "NPS4"]},
            "groups": {"type": "list", "elements": "dict", "default": []},
            "skipped_gpus": {"type": "list", "elements": "int", "default": []},
            "step": {"type": "str", "choices": ["read", "memory", "compute"], "default": "read"},
            "assume_reloaded": {"type": "bool", "default": False},
            "reload_compute": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        gpus = plan(amd_gpu_partitions(p["sysfs_root"]), p["memory"], p["groups"], p["skipped_gpus"])
    except FactsError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    except PlanError as exc:
        module.fail_json(msg=f"amd_gpu_partition: {exc} (below {p['sysfs_root']}/bus/pci/devices)")
    result = {
        "gpus": gpus,
        "memory_changes": [g["pci"] for g in gpus if g["want_memory"] and g["memory"] != g["want_memory"]],
        "compute_changes": [g["pci"] for g in gpus if g["want_compute"] and g["compute"] != g["want_compute"]],
        "written": [],
    }
    if p["step"] == "compute" and p["assume_reloaded"] and module.check_mode:
        for gpu in gpus:  # what a reload leaves: every GPU in the driver's mode for its (new) memory mode
            gpu["compute"] = p["reload_compute"].get(gpu["want_memory"] or gpu["memory"], gpu["compute"])
    if p["step"] != "read":
        result["written"] = apply(module, gpus, p["step"], p["sysfs_root"])
    diff = {
        "before": "".join(f"{w['file']}: {w['before']}\n" for w in result["written"]),
        "after": "".join(f"{w['file']}: {w['after']}\n" for w in result["written"]),
    }
    module.exit_json(changed=bool(result["written"]), diff=diff, **result)


if __name__ == "__main__":
    main()
