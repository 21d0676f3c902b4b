"""Read an AMD Instinct host's RAS error counters and retired VRAM pages from sysfs (docs/remediation.md, "AMD
Instinct GPUs"): the host-side counterpart of the NVIDIA driver's Xid lines.

Self-contained (standard library, Python 3.8+, imports nothing of gpufleet) so that it can be shipped to a host as
hostfacts is, or run there as a script (``python3 amd_ras.py [ROOT]`` prints the reading as JSON). Read-only. Files
are read below ``root`` (``/`` on a host, a recorded tree in tests), in each AMD GPU's PCI device directory
``sys/bus/pci/devices/<BDF>/`` (the same directory as ``/sys/class/drm/cardN/device``; only the primary partition's
card has it, so a partitioned GPU is read once):

- ``ras/<block>_err_count``: the amdgpu driver's error counts of one IP block (umc, gfx, sdma, mmhub, xgmi_wafl...),
  lines ``ue: N`` (uncorrectable), ``ce: N`` (corrected) and, on GPUs whose driver reads them through ACA (MI300),
  ``de: N`` (deferred); ``Query currently inaccessible`` while the driver cannot query them (a reset in progress);
- ``ras/gpu_vram_bad_pages``: one line per bad VRAM page, ``0x<pfn> : 0x<size> : R|P|F`` (R reserved: retired; P
  pending: retired in the driver's next window; F: the driver could not reserve it).

(Linux drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c, its DOC comments "RAS Error Count sysfs Interface" and "AMDGPU RAS
sysfs gpu_vram_bad_pages Interface"; ../shared/reference/amd-instinct.md section 6.)

The counts are the driver's since it loaded: a reboot clears them; bad pages are kept in the GPU's EEPROM across
boots. What a reading calls for is judged elsewhere (:func:`gpufleet.fleet.remediation.amd_faults`). A file that
cannot be read or parsed is reported in the GPU's ``problems``, never guessed; files are opened non-blocking and
read up to a bound, so nothing here waits on a FIFO or reads a device file without end.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from typing import Any

AMD_VENDOR = "0x1002"
# PCI classes of AMD's compute GPUs (class code and subclass): display controller (0x0380), processing accelerator
# (0x1200, MI300X)
GPU_CLASSES = ("0x0380", "0x1200")
RAS_DIR = "ras"
BAD_PAGES = "gpu_vram_bad_pages"
COUNT_SUFFIX = "_err_count"
COUNT_KINDS = ("ue", "ce", "de")
BAD_PAGE_FLAGS = {"R": "reserved", "P": "pending", "F": "failed"}
INACCESSIBLE = "Query currently inaccessible"
MAX_BYTES = 1024 * 1024  # a sysfs attribute is a page; the bad pages list a few thousand 28-byte lines at most
_COUNT_LINE = re.compile(r"(ue|ce|de): ([0-9]+)")
_BAD_PAGE_LINE = re.compile(r"(0x[0-9a-fA-F]+) : (0x[0-9a-fA-F]+) : ([RPF])")


class Unreadable(Exception):
    """A file that could not be read as text: ``why`` says so."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


def read_text(path: str) -> str:
    """The text of the regular file ``path``, at most :data:`MAX_BYTES`; :class:`Unreadable` otherwise
    (``FileNotFoundError`` passes through)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Unreadable("is not a regular file")
        data = b""
        while len(data) <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise Unreadable(f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise Unreadable(f"is larger than {MAX_BYTES // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Unreadable("is not UTF-8 text") from None


def parse_counts(text: str) -> dict[str, int]:
    """``ue: 1\\nce: 3\\nde: 0`` -> ``{"ue": 1, "ce": 3, "de": 0}``; ValueError for anything else (the driver's
    ``Query currently inaccessible`` included)."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _COUNT_LINE.fullmatch(line.strip())
        if m is None:
            raise ValueError(f"{line.strip()[:60]!r} is not a line 'ue|ce|de: N'")
        if m.group(1) in counts:
            raise ValueError(f"{m.group(1)} is counted twice")
        counts[m.group(1)] = int(m.group(2))
    if "ue" not in counts or "ce" not in counts:
        raise ValueError("no 'ue: N' and 'ce: N' lines")
    return counts


def parse_bad_pages(text: str) -> list[dict[str, str]]:
    """The bad pages' lines -> ``[{"pfn": "0x00000001", "size": "0x00001000", "flag": "reserved"}, ...]``;
    ValueError for a line of another shape."""
    pages = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _BAD_PAGE_LINE.fullmatch(line.strip())
        if m is None:
            raise ValueError(f"{line.strip()[:60]!r} is not a line '0xPFN : 0xSIZE : R|P|F'")
        pages.append({"pfn": m.group(1).lower(), "size": m.group(2).lower(), "flag": BAD_PAGE_FLAGS[m.group(3)]})
    return pages


def _is_amd_gpu(device: str) -> bool:
    try:
        vendor = read_text(os.path.join(device, "vendor")).strip().lower()
        klass = read_text(os.path.join(device, "class")).strip().lower()
    except (OSError, Unreadable):
        return False
    return vendor == AMD_VENDOR and klass[:6] in GPU_CLASSES


def read_gpu(device: str) -> dict[str, Any]:
    """One GPU's reading: ``{pci, counters: {block: {ue, ce[, de]}}, bad_pages: [...], problems: [...]}`` (``bad_pages``
    None when the driver keeps no list: ``amdgpu.bad_page_threshold=0``)."""
    ras = os.path.join(device, RAS_DIR)
    out: dict[str, Any] = {"pci": os.path.basename(device), "counters": {}, "bad_pages": None, "problems": []}
    try:
        names = sorted(os.listdir(ras))
    except OSError as exc:
        out["problems"].append(f"{RAS_DIR} cannot be listed: {exc.strerror or exc}")
        return out
    for name in names:
        if not name.endswith(COUNT_SUFFIX):
            continue
        block = name[: -len(COUNT_SUFFIX)]
        try:
            text = read_text(os.path.join(ras, name))
            if text.strip() == INACCESSIBLE:
                raise Unreadable("the driver says: " + INACCESSIBLE)
            out["counters"][block] = parse_counts(text)
        except (OSError, Unreadable, ValueError) as exc:
            out["problems"].append(f"{RAS_DIR}/{name} {getattr(exc, 'why', None) or exc}")
    try:
        out["bad_pages"] = parse_bad_pages(read_text(os.path.join(ras, BAD_PAGES)))
    except FileNotFoundError:
        pass
    except (OSError, Unreadable, ValueError) as exc:
        out["problems"].append(f"{RAS_DIR}/{BAD_PAGES} {getattr(exc, 'why', None) or exc}")
    return out


def read_ras(root: str = "/") -> dict[str, Any]:
    """Every AMD GPU's reading under ``root``, by PCI address: ``{"gpus": [...]}``. A GPU without a ``ras``
    directory (RAS off in the driver, or no driver bound) is listed with ``ras: false`` and nothing else."""
    devices = os.path.join(root, "sys", "bus", "pci", "devices")
    gpus = []
    for name in sorted(os.listdir(devices)) if os.path.isdir(devices) else []:
        device = os.path.join(devices, name)
        if not _is_amd_gpu(device):
            continue
        if not os.path.isdir(os.path.join(device, RAS_DIR)):
            gpus.append({"pci": name, "ras": False})
            continue
        gpus.append({"ras": True, **read_gpu(device)})
    return {"gpus": gpus}


if __name__ == "__main__":
    print(json.dumps(read_ras(sys.argv[1] if len(sys.argv) > 1 else "/"), indent=1, sort_keys=True))
