"""Read a host's topology from sysfs and procfs: NUMA nodes, cores, GPUs, NICs, NVSwitches, hugepages.

Self-contained (standard library, Python 3.8+): the Ansible module ``gpu_topology`` ships this file to hosts as
a module_utils, and the ``gpufleet`` CLI imports it. Read-only. Everything is read below ``host_root`` (``/`` on
a host, a recorded tree in tests), from these paths only:

- ``sys/devices/system/node/node*/{cpulist,meminfo,hugepages/hugepages-*/nr_hugepages}``
- ``sys/devices/system/cpu/cpu*/topology/{physical_package_id,core_id,thread_siblings_list}``
- ``sys/bus/pci/devices/*/{vendor,device,class,numa_node,local_cpulist,sriov_totalvfs,sriov_numvfs}``,
  ``.../net/*`` or ``.../virtio*/net/*`` (interface names) and ``.../physfn`` (present on SR-IOV virtual
  functions, which are not separate adapters)
- ``proc/cpuinfo`` (CPU vendor), ``proc/cmdline``, ``proc/meminfo``, ``proc/sys/kernel/osrelease``

A device whose ``numa_node`` is ``-1`` is reported with ``numa_node: None`` (unknown), never as node 0.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

# PCI classes (class code and subclass, the first four hex digits of the 24-bit class)
GPU_CLASSES = {"10de": ("0300", "0302"), "1002": ("0380", "1200")}
NIC_CLASSES = {"0200": "ethernet", "0207": "infiniband"}
NVSWITCH_CLASS = "0680"
NVIDIA = "10de"


def parse_cpulist(text: str) -> list[int]:
    """``0-3,8,10-11`` -> ``[0, 1, 2, 3, 8, 10, 11]``."""
    cpus = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.extend(range(int(lo), int(hi) + 1))
        else:
            cpus.append(int(part))
    return sorted(set(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8]`` -> ``0-3,8`` (the kernel's cpulist format)."""
    cpus = sorted(set(cpus))
    parts = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


def _read(path: str, default: str | None = None) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return default


def _int(path: str, default: int | None = None) -> int | None:
    text = _read(path)
    if text is None:
        return default
    try:
        return int(text.strip(), 0)
    except ValueError:
        return default


def _hex4(path: str) -> str:
    """A sysfs id like ``0x10de`` -> ``10de``."""
    text = (_read(path) or "").strip().lower()
    return text[2:] if text.startswith("0x") else text


def _numbered(directory: str, prefix: str) -> list[tuple[int, str]]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    out = []
    for name in names:
        m = re.match(rf"^{prefix}(\d+)$", name)
        if m:
            out.append((int(m.group(1)), os.path.join(directory, name)))
    return sorted(out)


def _interfaces(path: str) -> list[str]:
    """Network interface names of a PCI device: under ``net/``, or for virtio devices under ``virtio<N>/net/``."""
    names: list[str] = []
    for _, dev in [(0, path), *_numbered(path, "virtio")]:
        net = os.path.join(dev, "net")
        if os.path.isdir(net):
            names += os.listdir(net)
    return sorted(names)


def _numa(path: str) -> int | None:
    node = _int(os.path.join(path, "numa_node"))
    return None if node is None or node < 0 else node


def read_numa_nodes(root: str) -> list[dict[str, Any]]:
    nodes = []
    for node_id, path in _numbered(os.path.join(root, "sys/devices/system/node"), "node"):
        meminfo = _read(os.path.join(path, "meminfo"), "")
        m = re.search(r"MemTotal:\s+(\d+)\s+kB", meminfo)
        hugepages = {}
        hp_dir = os.path.join(path, "hugepages")
        for name in sorted(os.listdir(hp_dir)) if os.path.isdir(hp_dir) else []:
            size = re.match(r"^hugepages-(\d+)kB$", name)
            if size:
                hugepages[size.group(1)] = _int(os.path.join(hp_dir, name, "nr_hugepages"), 0)
        nodes.append(
            {
                "id": node_id,
                "cpus": parse_cpulist(_read(os.path.join(path, "cpulist"), "")),
                "memory_kib": int(m.group(1)) if m else 0,
                "hugepages": hugepages,
            }
        )
    return nodes


def read_cores(root: str, cpu_node: dict[int, int]) -> list[dict[str, Any]]:
    """Physical cores: package, core id, the CPUs (SMT siblings) on it, its NUMA node."""
    cores = {}
    for cpu, path in _numbered(os.path.join(root, "sys/devices/system/cpu"), "cpu"):
        topo = os.path.join(path, "topology")
        package = _int(os.path.join(topo, "physical_package_id"))
        core = _int(os.path.join(topo, "core_id"))
        if package is None or core is None:
            continue  # offline CPU: no topology
        siblings = parse_cpulist(_read(os.path.join(topo, "thread_siblings_list"), str(cpu)))
        key = (package, core, siblings[0] if siblings else cpu)
        entry = cores.setdefault(key, {"package": package, "core": core, "cpus": [], "numa_node": cpu_node.get(cpu)})
        entry["cpus"] = sorted(set(entry["cpus"]) | set(siblings) | {cpu})
    return sorted(cores.values(), key=lambda c: (c["package"], c["cpus"][0]))


def read_pci(root: str, gpu_catalog: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    gpus, nics, nvswitches, sriov = [], [], [], []
    base = os.path.join(root, "sys/bus/pci/devices")
    for addr in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        path = os.path.join(base, addr)
        vendor, device = _hex4(os.path.join(path, "vendor")), _hex4(os.path.join(path, "device"))
        cls = (_read(os.path.join(path, "class"), "") or "").strip().lower()
        cls = (cls[2:] if cls.startswith("0x") else cls)[:4]
        is_vf = os.path.exists(os.path.join(path, "physfn"))
        common = {
            "pci": addr,
            "vendor": vendor,
            "device": device,
            "class": cls,
            "numa_node": _numa(path),
        }
        totalvfs = _int(os.path.join(path, "sriov_totalvfs"), 0)
        interfaces = _interfaces(path)
        if cls in GPU_CLASSES.get(vendor, ()) and not is_vf:
            known = gpu_catalog.get(f"{vendor}:{device}") or {}
            gpu = dict(common)
            gpu["local_cpus"] = parse_cpulist(_read(os.path.join(path, "local_cpulist"), ""))
            gpu["model"] = known.get("model")
            gpu["mig_capable"] = known.get("mig")
            gpus.append(gpu)
        elif cls in NIC_CLASSES and not is_vf:
            nic = dict(common)
            nic["kind"] = NIC_CLASSES[cls]
            nic["interfaces"] = interfaces
            nic["sriov_totalvfs"] = totalvfs
            nic["sriov_numvfs"] = _int(os.path.join(path, "sriov_numvfs"), 0)
            nics.append(nic)
        elif vendor == NVIDIA and cls == NVSWITCH_CLASS:
            nvswitches.append(common)
        if totalvfs and not is_vf:
            dev = dict(common)
            dev["interfaces"] = interfaces
            dev["sriov_totalvfs"] = totalvfs
            dev["sriov_numvfs"] = _int(os.path.join(path, "sriov_numvfs"), 0)
            sriov.append(dev)
    return {"gpus": gpus, "nics": nics, "nvswitches": nvswitches, "sriov_devices": sriov}


def read_host(host_root: str = "/", gpu_catalog: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the topology planner needs, as plain JSON-serializable data.

    ``gpu_catalog`` maps ``vendor:device`` (``10de:2330``) to ``{"model": ..., "mig": bool}``; GPUs not in it are
    reported with ``model: None``."""
    root = host_root
    nodes = read_numa_nodes(root)
    cpu_node = {cpu: n["id"] for n in nodes for cpu in n["cpus"]}
    cpuinfo = _read(os.path.join(root, "proc/cpuinfo"), "")
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", cpuinfo, re.M)
    meminfo = _read(os.path.join(root, "proc/meminfo"), "")
    total = re.search(r"^MemTotal:\s+(\d+)\s+kB", meminfo, re.M)
    cores = read_cores(root, cpu_node)
    facts = {
        "host_root": host_root,
        "cpu_vendor": vendor.group(1) if vendor else None,
        "kernel": (_read(os.path.join(root, "proc/sys/kernel/osrelease"), "") or "").strip() or None,
        "cmdline": (_read(os.path.join(root, "proc/cmdline"), "") or "").strip(),
        "memory_kib": int(total.group(1)) if total else sum(n["memory_kib"] for n in nodes),
        "numa_nodes": nodes,
        "cores": cores,
        "smt": any(len(c["cpus"]) > 1 for c in cores),
    }
    facts.update(read_pci(root, gpu_catalog or {}))
    return facts
