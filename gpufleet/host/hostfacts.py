"""Read a host's topology from sysfs and procfs: NUMA nodes, cores, GPUs, NICs, NVSwitches, hugepages.

Self-contained (standard library, Python 3.8+): the Ansible module ``gpu_topology`` ships this file to hosts as
a module_utils, and the ``gpufleet`` CLI imports it. Read-only. Everything is read below ``host_root`` (``/`` on
a host, a recorded tree in tests), from these paths only:

- ``sys/devices/system/node/node*/{cpulist,meminfo,hugepages/hugepages-*/nr_hugepages}``
- ``sys/devices/system/cpu/cpu*/topology/{physical_package_id,core_id,thread_siblings_list}``
- ``sys/bus/pci/devices/*/{vendor,device,class,numa_node,local_cpulist,sriov_totalvfs,sriov_numvfs}``,
  ``.../drm/renderD*`` (a GPU's DRM render node, the name only: present once its driver is bound; on AMD Instinct,
  the primary partition's), and for AMD GPUs ``.../{current,available}_{compute,memory}_partition`` (their compute
  and memory partition modes, :func:`read_partition`),
  ``.../net/*`` or ``.../virtio*/net/*`` (interface names) and ``.../physfn`` (present on SR-IOV virtual
  functions, which are not separate adapters: each is listed under its physical function's ``vfs``, and the VFs'
  ``device`` id as the PF's ``vf_device``; ``physfn`` is a symlink on a host, a file holding the PF's address in a
  recorded tree)
- ``sys/firmware/acpi/tables/{DMAR,IVRS}``: whether each exists (the IOMMU's kind, :func:`read_iommu`)
- ``proc/cpuinfo`` (CPU vendor), ``proc/cmdline``, ``proc/meminfo``, ``proc/sys/kernel/osrelease``

A device whose ``numa_node`` is ``-1`` is reported with ``numa_node: None`` (unknown), never as node 0.

Facts that cannot be read or make no sense raise :class:`FactsError` naming the file and the reason, never a
guess: a file that is not a regular file (a FIFO, ``/dev/zero``, a directory), cannot be opened (a symlink loop),
is larger than :data:`MAX_FILE_BYTES`, is not UTF-8 or does not parse (a garbage or reversed CPU list); a NUMA
node without its ``cpulist`` or ``meminfo``; CPUs that two nodes or two cores claim (SMT sibling lists that
disagree), an online CPU in no node; a device whose ``numa_node`` names a node the host does not have. A file
that does not exist is the documented default where one is listed below (an offline CPU has no topology, most
devices have no SR-IOV files). Files are opened non-blocking and read up to a bound, so nothing here waits on a
FIFO or reads a device file without end.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping
from typing import Any

# PCI classes (class code and subclass, the first four hex digits of the 24-bit class)
GPU_CLASSES = {"10de": ("0300", "0302"), "1002": ("0380", "1200")}
NIC_CLASSES = {"0200": "ethernet", "0207": "infiniband"}
NVSWITCH_CLASS = "0680"
NVIDIA = "10de"
AMD = "1002"
# An AMD Instinct GPU's partition files, in its PCI device directory (the primary partition's; amdgpu_gfx.c and
# amdgpu_gmc.c): the current compute mode (SPX, DPX, QPX, CPX...) and the modes it takes, the current memory (NPS)
# mode and the modes it takes; available_memory_partition exists only when the GPU has more than one NPS mode.
PARTITION_FILES = {
    "compute": "current_compute_partition",
    "available_compute": "available_compute_partition",
    "memory": "current_memory_partition",
    "available_memory": "available_memory_partition",
}
_PARTITION_MODE = re.compile(r"[A-Z][A-Z0-9]*")
_RENDER_NODE = re.compile(r"renderD([0-9]+)")
# A sysfs attribute holds at most a page (4 KiB, 64 KiB on some arm64 kernels); the procfs files read here a few
# KiB, except proc/cpuinfo, of which only the head is read (its first CPU names the vendor).
MAX_FILE_BYTES = 1024 * 1024
CPUINFO_HEAD_BYTES = 64 * 1024
# CPU numbers in a CPU list stay below this (Linux allows at most 8192 CPUs today); a list beyond is garbage.
MAX_CPUS = 65536
_CPU_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FactsError(ValueError):
    """A host's facts that cannot be read or make no sense: ``path`` names the sysfs/procfs file (below the host
    root), ``reason`` says what is wrong with it."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"{path}: {reason}")


def parse_cpulist(text: str) -> list[int]:
    """``0-3,8,10-11`` -> ``[0, 1, 2, 3, 8, 10, 11]``; blank text is no CPU. Raises ``ValueError`` for anything else
    (a part that is no number or range, a reversed range like ``7-0``, a CPU number from ``MAX_CPUS`` on)."""
    cpus: set[int] = set()
    if not text.strip():
        return []
    for part in text.strip().split(","):
        m = _CPU_RANGE.fullmatch(part.strip())
        if not m:
            raise ValueError(f"{part.strip()[:40]!r} is neither a CPU number nor a range like 0-3")
        low = int(m.group(1))
        high = int(m.group(2)) if m.group(2) is not None else low
        if high < low:
            raise ValueError(f"the range {low}-{high} is reversed")
        if high >= MAX_CPUS:
            raise ValueError(f"CPU {high} is beyond any kernel's {MAX_CPUS} CPUs")
        cpus.update(range(low, high + 1))
    return sorted(cpus)


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


class NotRegularFile(Exception):
    """What :func:`read_bounded` found instead of a regular file: ``kind`` names it ("a named pipe (FIFO)"...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(kind)


def read_bounded(path: str, limit: int) -> tuple[bytes, int]:
    """The first ``limit + 1`` bytes of the regular file ``path`` (more than ``limit`` means it is larger) and the
    size its file system reports (0 for a procfs file, so the bytes are read, not trusted to the size). Opened
    non-blocking, so a FIFO does not wait for a writer; :class:`NotRegularFile` for anything but a regular file,
    ``OSError`` when it cannot be opened or read. Shared with gpufleet's input files (``yamldoc.read_text_file``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(next((name for test, name in _FILE_KINDS if test(info.st_mode)), "something else"))
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), info.st_size
    finally:
        os.close(fd)


def _read(path: str, default: str | None = None, head: int | None = None) -> str | None:
    """The text of the regular file ``path``, or ``default`` when it does not exist. Read by :func:`read_bounded`:
    at most ``MAX_FILE_BYTES`` (or, with ``head``, its first ``head`` bytes, whole lines). Raises
    :class:`FactsError` for anything else."""
    limit = head or MAX_FILE_BYTES
    try:
        data, _ = read_bounded(path, limit)
    except FileNotFoundError:
        return default
    except NotRegularFile as exc:
        raise FactsError(path, f"is {exc.kind}, not a regular file") from None
    except OSError as exc:
        raise FactsError(path, f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit:
        if head is None:
            raise FactsError(path, f"is larger than {limit // 1024} KiB, more than any sysfs or procfs file read here")
        data = data[:limit].rpartition(b"\n")[0]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FactsError(path, f"is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})") from None


def _int(path: str, default: int | None = None) -> int | None:
    """The integer in ``path`` (decimal, or ``0x`` hex), ``default`` when the file does not exist."""
    text = _read(path)
    if text is None:
        return default
    try:
        return int(text.strip(), 0)
    except ValueError:
        raise FactsError(path, f"holds {text.strip()[:40]!r}, not an integer") from None


def _cpulist(path: str, default: str | None = None) -> list[int]:
    """The CPU list in ``path``; a missing file reads as ``default``, or is refused when there is none (a NUMA
    node's ``cpulist``)."""
    text = _read(path, default)
    if text is None:
        raise FactsError(path, "is missing (the kernel writes one for every NUMA node)")
    try:
        return parse_cpulist(text)
    except ValueError as exc:
        raise FactsError(path, f"is not a CPU list: {exc}") from None


def _hex4(path: str) -> str:
    """A sysfs id like ``0x10de`` -> ``10de``."""
    text = (_read(path) or "").strip().lower()
    return text[2:] if text.startswith("0x") else text


def _listdir(directory: str) -> list[str]:
    """The names in ``directory``; none when it does not exist. Raises :class:`FactsError` when it cannot be listed
    (a symlink loop, a file where a directory belongs)."""
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise FactsError(directory, f"cannot be listed: {exc.strerror or exc}") from None


def _numbered(directory: str, prefix: str) -> list[tuple[int, str]]:
    out: dict[int, str] = {}
    for name in _listdir(directory):
        m = re.match(rf"^{prefix}([0-9]+)$", name)
        if m:
            number = int(m.group(1))
            if number in out:
                raise FactsError(directory, f"holds both {os.path.basename(out[number])} and {name}")
            out[number] = os.path.join(directory, name)
    return sorted(out.items())


def _interfaces(path: str) -> list[str]:
    """Network interface names of a PCI device: under ``net/``, or for virtio devices under ``virtio<N>/net/``."""
    names: list[str] = []
    for _, dev in [(0, path), *_numbered(path, "virtio")]:
        names += _listdir(os.path.join(dev, "net"))
    return sorted(names)


def _numa(path: str) -> int | None:
    """A device's NUMA node; ``None`` for the kernel's ``-1`` (no affinity) or no ``numa_node`` file."""
    where = os.path.join(path, "numa_node")
    node = _int(where)
    if node is not None and node < -1:
        raise FactsError(where, f"holds {node}: not a NUMA node (-1 means none)")
    return None if node is None or node < 0 else node


def read_numa_nodes(root: str) -> list[dict[str, Any]]:
    """NUMA nodes: CPUs, memory and hugepages per size. Every node directory has ``cpulist`` and ``meminfo``."""
    nodes = []
    for node_id, path in _numbered(os.path.join(root, "sys/devices/system/node"), "node"):
        meminfo_path = os.path.join(path, "meminfo")
        meminfo = _read(meminfo_path)
        if meminfo is None:
            raise FactsError(meminfo_path, "is missing (the kernel writes one for every NUMA node)")
        m = re.search(r"MemTotal:\s+([0-9]+)\s+kB", meminfo)
        if not m:
            raise FactsError(meminfo_path, "has no 'MemTotal: <n> kB' line")
        hugepages = {}
        hp_dir = os.path.join(path, "hugepages")
        for name in sorted(_listdir(hp_dir)):
            size = re.match(r"^hugepages-([0-9]+)kB$", name)
            if size:
                hugepages[size.group(1)] = _int(os.path.join(hp_dir, name, "nr_hugepages"), 0)
        nodes.append(
            {
                "id": node_id,
                "cpus": _cpulist(os.path.join(path, "cpulist")),
                "memory_kib": int(m.group(1)),
                "hugepages": hugepages,
            }
        )
    return nodes


def read_cores(root: str, cpu_node: dict[int, int]) -> list[dict[str, Any]]:
    """Physical cores: package, core id, the CPUs (SMT siblings) on it, its NUMA node. A CPU without
    ``physical_package_id`` or ``core_id`` is offline and left out; without ``thread_siblings_list``, it is a core of
    its own."""
    cores = {}
    for cpu, path in _numbered(os.path.join(root, "sys/devices/system/cpu"), "cpu"):
        topo = os.path.join(path, "topology")
        package = _int(os.path.join(topo, "physical_package_id"))
        core = _int(os.path.join(topo, "core_id"))
        if package is None or core is None:
            continue  # offline CPU: no topology
        siblings = _cpulist(os.path.join(topo, "thread_siblings_list"), str(cpu))
        key = (package, core, siblings[0] if siblings else cpu)
        entry = cores.setdefault(key, {"package": package, "core": core, "cpus": [], "numa_node": cpu_node.get(cpu)})
        entry["cpus"] = sorted(set(entry["cpus"]) | set(siblings) | {cpu})
    return sorted(cores.values(), key=lambda c: (c["package"], c["cpus"][0]))


def _physfn(path: str) -> str:
    """The PCI address of a virtual function's physical function: ``physfn`` is a symlink on a host, a file holding
    the address in a recorded tree."""
    link = os.path.join(path, "physfn")
    if os.path.islink(link):
        return os.path.basename(os.readlink(link))
    return (_read(link, "") or "").strip()


def _modes(path: str, text: str) -> list[str]:
    """``SPX, DPX, QPX, CPX`` (or one mode, ``CPX``) -> the modes, upper case as the kernel prints them."""
    modes = [m.strip().upper() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if not _PARTITION_MODE.fullmatch(m)]
    if bad:
        raise FactsError(path, f"holds {bad[0][:40]!r}, not a partition mode like SPX or NPS1")
    return modes


def read_partition(path: str) -> dict[str, Any] | None:
    """An AMD GPU's partition modes from its PCI device directory ``path``: ``{compute, memory, available_compute,
    available_memory}`` (``CPX``, ``NPS4``, ``["SPX", "DPX", "QPX", "CPX"]``, ``["NPS1", "NPS4"]``); None when the
    directory has none of the four files (a GPU without partitions, or no amdgpu driver bound). A missing current
    file reads None, a missing list []; without ``available_memory_partition`` (the kernel writes it only for more
    than one NPS mode) the current memory mode is the one available."""
    read: dict[str, list[str]] = {}
    for key, name in PARTITION_FILES.items():
        where = os.path.join(path, name)
        text = _read(where)
        if text is not None:
            read[key] = _modes(where, text)
    if not read:
        return None
    for key in ("compute", "memory"):
        if len(read.get(key, [])) > 1:
            raise FactsError(os.path.join(path, PARTITION_FILES[key]), f"names {len(read[key])} modes, not one")
    memory = (read.get("memory") or [None])[0]
    available_memory = read.get("available_memory")
    if available_memory is None:
        available_memory = [memory] if memory is not None else []
    return {
        "compute": (read.get("compute") or [None])[0],
        "memory": memory,
        "available_compute": read.get("available_compute", []),
        "available_memory": available_memory,
    }


def _render_node(path: str) -> str | None:
    """The DRM render node (``renderD128``) of a PCI device: the name in its ``drm/`` directory, None without one (no
    DRM driver bound). On AMD Instinct GPUs the secondary partitions' nodes belong to platform devices, not here."""
    found = [n for n in _listdir(os.path.join(path, "drm")) if _RENDER_NODE.fullmatch(n)]
    return min(found, key=lambda n: int(n[len("renderD") :])) if found else None


def _pci_class(path: str) -> str:
    """A PCI device's class code and subclass (``0x120000`` -> ``1200``)."""
    cls = (_read(os.path.join(path, "class"), "") or "").strip().lower()
    return (cls[2:] if cls.startswith("0x") else cls)[:4]


def amd_gpu_partitions(sys_root: str = "/sys") -> list[dict[str, Any]]:
    """The AMD GPUs below ``sys_root`` (``/sys`` on a host; a stand-in tree in tests) in PCI address order, each
    ``{pci, device, partition}`` (:func:`read_partition`): what the ``amd_gpu_partition`` module reads and sets. SR-IOV
    virtual functions are left out (the kernel refuses partition changes there)."""
    base = os.path.join(sys_root, "bus/pci/devices")
    gpus = []
    for addr in sorted(_listdir(base)):
        path = os.path.join(base, addr)
        if _hex4(os.path.join(path, "vendor")) != AMD or os.path.lexists(os.path.join(path, "physfn")):
            continue
        if _pci_class(path) in GPU_CLASSES[AMD]:
            gpus.append({"pci": addr, "device": _hex4(os.path.join(path, "device")), "partition": read_partition(path)})
    return gpus


def read_pci(root: str, gpu_catalog: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    gpus, nics, nvswitches, sriov = [], [], [], []
    vfs: dict[str, list[str]] = {}
    vf_device: dict[str, str] = {}
    base = os.path.join(root, "sys/bus/pci/devices")
    for addr in sorted(_listdir(base)):
        path = os.path.join(base, addr)
        vendor, device = _hex4(os.path.join(path, "vendor")), _hex4(os.path.join(path, "device"))
        cls = _pci_class(path)
        is_vf = os.path.lexists(os.path.join(path, "physfn"))
        if is_vf:
            vfs.setdefault(_physfn(path), []).append(addr)
            vf_device.setdefault(_physfn(path), device)  # one SR-IOV capability, one VF Device ID for all its VFs
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
            gpu["local_cpus"] = _cpulist(os.path.join(path, "local_cpulist"), "")
            gpu["model"] = known.get("model")
            gpu["mig_capable"] = known.get("mig")
            gpu["render_node"] = _render_node(path)
            gpu["partition"] = read_partition(path) if vendor == AMD else None
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
    for dev in sriov:
        dev["vfs"] = sorted(vfs.get(dev["pci"], []))  # the VFs that exist now (sriov_numvfs of them)
        dev["vf_device"] = vf_device.get(dev["pci"])  # their PCI device id (vendor: the PF's); None without VFs
    return {"gpus": gpus, "nics": nics, "nvswitches": nvswitches, "sriov_devices": sriov}


def check_facts(facts: Mapping[str, Any]) -> None:
    """Raise :class:`FactsError` unless the facts agree with each other: every CPU of a core on one NUMA node, the
    one whose ``cpulist`` lists it, and in no other core or node; every device's NUMA node one the host has. The
    error names the sysfs file (below ``facts["host_root"]``) that says otherwise. :func:`read_host` and the
    topology planner call it."""
    root = facts.get("host_root") or ""
    nodes = "sys/devices/system/node"
    node_of: dict[int, int] = {}
    seen: set[int] = set()
    for node in facts["numa_nodes"]:
        if node["id"] in seen:
            raise FactsError(os.path.join(root, nodes), f"names NUMA node {node['id']} twice")
        seen.add(node["id"])
        for cpu in node["cpus"]:
            if cpu in node_of:
                raise FactsError(
                    os.path.join(root, f"{nodes}/node{node['id']}/cpulist"),
                    f"lists CPU {cpu}, which node{node_of[cpu]}/cpulist lists too",
                )
            node_of[cpu] = node["id"]
    core_of: dict[int, list[int]] = {}
    for core in facts["cores"]:
        siblings = os.path.join(root, f"sys/devices/system/cpu/cpu{core['cpus'][0]}/topology/thread_siblings_list")
        for cpu in core["cpus"]:
            if cpu in core_of:
                both = format_cpulist([*core_of[cpu], *core["cpus"]])
                raise FactsError(
                    siblings,
                    f"CPU {cpu} is in the core {format_cpulist(core['cpus'])} here and in the core"
                    f" {format_cpulist(core_of[cpu])}: the thread_siblings_list files of CPUs {both} disagree",
                )
            core_of[cpu] = core["cpus"]
            if cpu not in node_of:
                raise FactsError(
                    siblings, f"CPU {cpu} of the core {format_cpulist(core['cpus'])} is in no {nodes}/node*/cpulist"
                )
            if node_of[cpu] != core["numa_node"]:
                raise FactsError(
                    siblings,
                    f"the SMT siblings {format_cpulist(core['cpus'])} are not all on NUMA node {core['numa_node']}:"
                    f" {nodes}/node{node_of[cpu]}/cpulist lists CPU {cpu}",
                )
    ids = sorted(seen)
    for kind in ("gpus", "nics", "nvswitches", "sriov_devices"):
        for dev in facts.get(kind, []):
            if dev["numa_node"] is not None and dev["numa_node"] not in ids:
                raise FactsError(
                    os.path.join(root, f"sys/bus/pci/devices/{dev['pci']}/numa_node"),
                    f"names NUMA node {dev['numa_node']}, which {nodes} does not have"
                    f" ({'nodes ' + format_cpulist(ids) if ids else 'no node'})",
                )


def read_iommu(root: str) -> str | None:
    """The host's IOMMU as its firmware describes it: ``intel`` (VT-d, an ACPI DMAR table), ``amd`` (AMD-Vi, an
    IVRS table), else None (no table, or a recorded tree without ``sys/firmware``). The table names the IOMMU the
    kernel arguments must switch on, which is not always the CPU's vendor: the lab's VMs have an AMD-named CPU under
    software emulation and QEMU's emulated Intel IOMMU."""
    tables = os.path.join(root, "sys/firmware/acpi/tables")
    if os.path.lexists(os.path.join(tables, "DMAR")):
        return "intel"
    if os.path.lexists(os.path.join(tables, "IVRS")):
        return "amd"
    return None


def read_host(host_root: str = "/", gpu_catalog: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the topology planner needs, as plain JSON-serializable data.

    ``gpu_catalog`` maps ``vendor:device`` (``10de:2330``) to ``{"model": ..., "mig": bool}``; GPUs not in it are
    reported with ``model: None``. Each GPU: ``pci``, ``vendor``, ``device``, ``class``, ``numa_node``, ``local_cpus``,
    ``model``, ``mig_capable``, ``render_node`` (``renderD128``; None before a driver binds it) and ``partition`` (AMD
    GPUs: :func:`read_partition`; None on NVIDIA's). Raises :class:`FactsError` (see the module docstring)."""
    root = host_root
    nodes = read_numa_nodes(root)
    cpu_node = {cpu: n["id"] for n in nodes for cpu in n["cpus"]}
    cpuinfo = _read(os.path.join(root, "proc/cpuinfo"), "", head=CPUINFO_HEAD_BYTES)
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", cpuinfo, re.M)
    meminfo = _read(os.path.join(root, "proc/meminfo"), "")
    total = re.search(r"^MemTotal:\s+([0-9]+)\s+kB", meminfo, re.M)
    cores = read_cores(root, cpu_node)
    facts = {
        "host_root": host_root,
        "cpu_vendor": vendor.group(1) if vendor else None,
        "iommu": read_iommu(root),
        "kernel": (_read(os.path.join(root, "proc/sys/kernel/osrelease"), "") or "").strip() or None,
        "cmdline": (_read(os.path.join(root, "proc/cmdline"), "") or "").strip(),
        "memory_kib": int(total.group(1)) if total else sum(n["memory_kib"] for n in nodes),
        "numa_nodes": nodes,
        "cores": cores,
        "smt": any(len(c["cpus"]) > 1 for c in cores),
    }
    facts.update(read_pci(root, gpu_catalog or {}))
    check_facts(facts)
    return facts
