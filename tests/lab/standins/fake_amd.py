#!/usr/bin/env python3
"""A TEST DOUBLE of the amdgpu kernel driver's partition files and of AMD's ``amd-smi``, for the lab (which has no
AMD GPU). Never installed on a real host.

It keeps a stand-in sysfs tree of MI300X GPUs (``<sys>/bus/pci/devices/<BDF>/``: ``vendor``, ``device``, ``class`` and
the four partition files) and, beside it (``<sys>/../state.json``), what the kernel knows that the files do not show:
each GPU's applied modes and the memory mode requested for the next driver load. Its behaviour follows the kernel
and AMD's documentation (../shared/reference/amd-instinct.md, sections 1 and 2), for the subset the roles use:

- ``current_compute_partition``: a write switches the GPU at once; a mode the GPU does not offer, or one that does
  not run with its current memory mode, is refused (EINVAL) and nothing changes. Case does not matter.
- ``current_memory_partition``: a write only records the request ("NPS mode change requested, please remove and
  reload the driver"); the file keeps showing the current mode. In an XGMI hive (the 8-GPU MI300X platforms: the
  default here) the request is the hive's. A mode the GPU does not offer is refused (EINVAL).
- a driver reload (``fake_amd.py reload``, standing in for ``modprobe -r amdgpu && modprobe amdgpu``) applies the
  requested memory mode to every GPU of the hive and puts every GPU in the compute mode the driver chooses for its
  memory mode (``amdgpu.user_partt_mode`` AUTO on 8-XCD parts: SPX for NPS1, DPX for NPS2, CPX for NPS4): "the GPU
  will always revert back to this default SPX mode when ... the amdgpu driver is unloaded and reloaded", and
  "Setting NPS4 from SPX switches the GPU to CPX".
- valid pairs on MI300X (the amdgpu driver's rule, aqua_vanjaram.c): SPX with NPS1; DPX with NPS1 or NPS2; QPX and
  CPX with NPS1 or NPS4.
- ``amd-smi static --partition`` prints ``COMPUTE_PARTITION``, ``MEMORY_PARTITION`` and ``PARTITION_ID`` for each
  GPU amd-smi lists: in DPX/QPX/CPX a GPU's secondary partitions are listed after it (IDs 1 to 1, 3 or 7), with
  their own GPU numbers. ``amd-smi set --gpu N|all --compute-partition MODE`` and ``amd-smi set --memory-partition
  MODE`` write as the kernel's files take them; a set on a secondary partition is refused.

Files are plain files here, so a write cannot be refused at the moment it is made, and a memory write changes what
the file shows: every run of this double (its amd-smi, its reload) first takes what was written into the files since
its last run as the kernel would have taken those writes (:func:`sync`): a refused compute mode is put back and
logged, a memory mode becomes the request and the file shows the current mode again. A read of the tree between a
write and the next run of the double sees the written value (the kernel's file would not); the roles never read
there. Logged events: ``state.json``'s ``log``.

Called as ``amd-smi`` (a symlink or copy of this file by that name) it is amd-smi; otherwise ``fake_amd.py build
[--gpus N] [--compute SPX] [--memory NPS1]``, ``reload``, ``sync``, ``write BDF ATTRIBUTE VALUE``. The tree:
``$GPUFLEET_FAKE_AMD_SYSFS``, default ``/var/lib/gpufleet-fake-amd/sys``.
"""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path
from typing import Any

SYSFS = Path(os.environ.get("GPUFLEET_FAKE_AMD_SYSFS", "/var/lib/gpufleet-fake-amd/sys"))
MI300X = {"vendor": "0x1002", "device": "0x74a1", "class": "0x120000"}
COMPUTE_MODES = ("SPX", "DPX", "QPX", "CPX")
MEMORY_MODES = ("NPS1", "NPS4")  # what an MI300X's firmware offers here (available_memory_partition)
VALID = {"SPX": ("NPS1",), "DPX": ("NPS1", "NPS2"), "QPX": ("NPS1", "NPS4"), "CPX": ("NPS1", "NPS4")}
AUTO_COMPUTE = {"NPS1": "SPX", "NPS2": "DPX", "NPS4": "CPX"}  # the driver's choice at load (8 XCDs)
PARTITIONS = {"SPX": 1, "DPX": 2, "QPX": 4, "CPX": 8}
FILES = {
    "compute": "current_compute_partition",
    "memory": "current_memory_partition",
}


class KernelError(OSError):
    """What the kernel's write returns instead of success (EINVAL, EPERM), with why (the kernel logs it)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(code, f"{os.strerror(code)}: {why}")
        self.why = why


# -- the tree and its state ------------------------------------------------------------------------------------


def state_file(sys_root: Path) -> Path:
    return sys_root.parent / "state.json"


def load(sys_root: Path) -> dict[str, Any]:
    return json.loads(state_file(sys_root).read_text())


def save(sys_root: Path, state: dict[str, Any]) -> None:
    tmp = state_file(sys_root).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n")
    tmp.replace(state_file(sys_root))


def device_dir(sys_root: Path, pci: str) -> Path:
    return sys_root / "bus/pci/devices" / pci


def render(sys_root: Path, state: dict[str, Any]) -> None:
    """The files as the kernel shows them: each GPU's applied modes."""
    for gpu in state["gpus"]:
        d = device_dir(sys_root, gpu["pci"])
        (d / FILES["compute"]).write_text(gpu["compute"] + "\n")
        (d / FILES["memory"]).write_text(gpu["memory"] + "\n")


def build(sys_root: Path, gpus: int = 8, compute: str = "SPX", memory: str = "NPS1") -> dict[str, Any]:
    """A tree of ``gpus`` MI300X GPUs in ``compute``/``memory`` (a valid pair) and its state; returns the state."""
    if memory not in VALID.get(compute, ()):
        raise ValueError(f"{compute} with {memory} is no MI300X partition mode")
    state: dict[str, Any] = {"hive": True, "requested_memory": None, "log": [], "gpus": []}
    for i in range(gpus):
        pci = f"0000:{0x05 + 0x20 * i:02x}:00.0"
        d = device_dir(sys_root, pci)
        d.mkdir(parents=True, exist_ok=True)
        for name, value in MI300X.items():
            (d / name).write_text(value + "\n")
        (d / "available_compute_partition").write_text(", ".join(COMPUTE_MODES) + "\n")
        (d / "available_memory_partition").write_text(", ".join(MEMORY_MODES) + "\n")
        state["gpus"].append({"pci": pci, "compute": compute, "memory": memory, "requested_memory": None})
    render(sys_root, state)
    save(sys_root, state)
    return state


# -- the kernel's writes -----------------------------------------------------------------------------------------


def _gpu(state: dict[str, Any], pci: str) -> dict[str, Any]:
    gpu = next((g for g in state["gpus"] if g["pci"] == pci), None)
    if gpu is None:
        raise KernelError(errno.ENODEV, f"no GPU {pci}")
    return gpu


def write(state: dict[str, Any], pci: str, attribute: str, value: str) -> str:
    """The kernel's answer to writing ``value`` to the GPU's ``current_<attribute>_partition`` (attribute:
    ``compute`` or ``memory``), applied to ``state``; returns what the kernel logs, raises :class:`KernelError`."""
    gpu = _gpu(state, pci)
    mode = value.strip().upper()
    if attribute == "compute":
        if mode not in COMPUTE_MODES:
            raise KernelError(errno.EINVAL, f"{pci}: {value.strip()!r} is no compute partition mode of this GPU")
        if gpu["memory"] not in VALID[mode]:
            raise KernelError(errno.EINVAL, f"{pci}: {mode} does not run with memory partition {gpu['memory']}")
        if mode == gpu["compute"]:
            return f"{pci}: already in {mode}"
        gpu["compute"] = mode
        return f"{pci}: compute partition {mode}"
    if attribute == "memory":
        if mode not in MEMORY_MODES:
            raise KernelError(errno.EINVAL, f"{pci}: {value.strip()!r} is no memory partition mode of this GPU")
        if mode == gpu["memory"]:
            return f"{pci}: already in {mode}"
        for other in state["gpus"] if state["hive"] else [gpu]:
            other["requested_memory"] = mode
        return f"{pci}: NPS mode change requested, please remove and reload the driver"
    raise KernelError(errno.ENOENT, f"no attribute current_{attribute}_partition")


def sync(sys_root: Path, state: dict[str, Any]) -> list[str]:
    """Take the writes made to the plain files since the last run as the kernel would have taken them (see the
    module docstring); the files then show the kernel's view again. Returns the events, also logged in the state."""
    events = []
    for gpu in state["gpus"]:
        d = device_dir(sys_root, gpu["pci"])
        for attribute in ("memory", "compute"):
            written = (d / FILES[attribute]).read_text().strip()
            if written == gpu[attribute]:
                continue
            try:
                events.append(write(state, gpu["pci"], attribute, written))
            except KernelError as exc:
                events.append(f"refused {FILES[attribute]} {written!r}: {exc.strerror}")
    render(sys_root, state)
    state["log"] += events
    return events


def reload(sys_root: Path, state: dict[str, Any]) -> list[str]:
    """``modprobe -r amdgpu && modprobe amdgpu``: the requested memory modes applied, every GPU's compute mode the
    driver's choice for its memory mode."""
    events = []
    for gpu in state["gpus"]:
        if gpu["requested_memory"]:
            gpu["memory"], gpu["requested_memory"] = gpu["requested_memory"], None
        gpu["compute"] = AUTO_COMPUTE[gpu["memory"]]
        events.append(f"{gpu['pci']}: loaded in {gpu['compute']}/{gpu['memory']}")
    render(sys_root, state)
    state["log"] += ["driver reloaded", *events]
    return events


# -- amd-smi ---------------------------------------------------------------------------------------------------


def smi_gpus(state: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """What amd-smi lists, in its order: each GPU (PCI order), then its secondary partitions: (GPU, partition id)."""
    return [(gpu, pid) for gpu in state["gpus"] for pid in range(PARTITIONS[gpu["compute"]])]


def smi_static_partition(state: dict[str, Any]) -> str:
    blocks = []
    for index, (gpu, pid) in enumerate(smi_gpus(state)):
        blocks.append(
            f"GPU: {index}\n    PARTITION:\n        COMPUTE_PARTITION: {gpu['compute']}\n"
            f"        MEMORY_PARTITION: {gpu['memory']}\n        PARTITION_ID: {pid}\n"
        )
    return "\n".join(blocks)


def _option(args: list[str], *names: str) -> list[str] | None:
    """The values after the first of ``names`` in ``args`` (up to the next option), None when it is not there."""
    for i, arg in enumerate(args):
        if arg in names:
            values = []
            for value in args[i + 1 :]:
                if value.startswith("-"):
                    break
                values.append(value)
            return values
    return None


def smi_set(state: dict[str, Any], args: list[str]) -> list[str]:
    """``set [--gpu N...|all] --compute-partition MODE`` or ``set --memory-partition MODE`` (memory: every GPU when
    no --gpu is given)."""
    listed = smi_gpus(state)
    chosen = _option(args, "-g", "--gpu")
    if chosen in (None, ["all"]):
        targets = [gpu for gpu, pid in listed if pid == 0]
    else:
        targets = []
        for token in chosen:
            if not token.isdigit() or int(token) >= len(listed):
                raise KernelError(errno.ENODEV, f"amd-smi lists no GPU {token}")
            gpu, pid = listed[int(token)]
            if pid:
                raise KernelError(errno.EPERM, f"GPU {token} is partition {pid} of {gpu['pci']}: set the primary")
            targets.append(gpu)
    compute, memory = _option(args, "-C", "--compute-partition"), _option(args, "-M", "--memory-partition")
    if bool(compute) == bool(memory):
        raise KernelError(errno.EINVAL, "give one of --compute-partition MODE and --memory-partition MODE")
    attribute, value = ("compute", compute[0]) if compute else ("memory", memory[0])
    return [write(state, gpu["pci"], attribute, value) for gpu in targets]


def amd_smi(sys_root: Path, args: list[str]) -> int:
    state = load(sys_root)
    sync(sys_root, state)
    try:
        if args[:1] == ["static"] and "--partition" in args[1:]:
            print(smi_static_partition(state), end="")
            return 0
        if args[:1] == ["set"]:
            for line in smi_set(state, args[1:]):
                print(line)
            if _option(args, "-M", "--memory-partition"):
                print("The memory partition takes effect after a driver reload: modprobe -r amdgpu && modprobe amdgpu")
            return 0
    except KernelError as exc:
        print(f"error: {exc.strerror}", file=sys.stderr)
        return 1
    finally:
        render(sys_root, state)
        save(sys_root, state)
    print(
        "this amd-smi is a gpufleet lab TEST DOUBLE; supported: static --partition, set --compute-partition, set"
        " --memory-partition",
        file=sys.stderr,
    )
    return 2


def main(argv: list[str]) -> int:
    if Path(argv[0]).name == "amd-smi":
        return amd_smi(SYSFS, argv[1:])
    command, args = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
    if command == "build":
        build(
            SYSFS,
            int((_option(args, "--gpus") or ["8"])[0]),
            (_option(args, "--compute") or ["SPX"])[0],
            (_option(args, "--memory") or ["NPS1"])[0],
        )
        return 0
    if command not in ("reload", "sync", "write"):
        print("usage: fake_amd.py build|reload|sync|write BDF compute|memory VALUE (or as amd-smi)", file=sys.stderr)
        return 2
    state = load(SYSFS)
    events = sync(SYSFS, state)
    try:
        if command == "reload":
            events = reload(SYSFS, state)
        elif command == "write":
            events = [write(state, args[0], args[1], args[2])]
    except KernelError as exc:
        print(f"error: {exc.strerror}", file=sys.stderr)
        return 1
    finally:
        render(SYSFS, state)
        save(SYSFS, state)
    for event in events:
        print(event)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
