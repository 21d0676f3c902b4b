"""A fleet's current MIG layouts (input of ``gpufleet mig pack --current``), validated like stack and demand files.

```yaml
fleet:
  - gpu: H100-SXM5-80GB           # catalog name, PCI id or nvidia-smi name
    hosts: gpu-a[01-40]           # a host name, a numbered range prefix[FIRST-LAST]suffix, or a list of them
    gpus: 8                       # GPUs per host (indices 0-7), or the indices: [0, 1, 2, 3]
    profiles: {3g.40gb: 2}        # the instances each of these GPUs has now; {} for none
  - gpu: H100-SXM5-80GB
    hosts: [gpu-b01, gpu-b02]
    gpus: [4, 5, 6, 7]
    profiles: {1g.10gb: 7}
```

A range keeps the width of its first number (``[01-40]``: ``01`` to ``40``). Every GPU (host and index) is listed
once; every layout must fit its GPU (:func:`gpufleet.mig.check`: the same rules as ``mig check``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Annotated, Any

from pydantic import Field, PlainValidator

from gpufleet.catalog import Catalog, Gpu
from gpufleet.common.diagnostics import Diagnostic, Finding
from gpufleet.common.yamldoc import located, read_model
from gpufleet.mig.demand import MAX_FLEET_GPUS, mig_gpu
from gpufleet.mig.placement import as_layout, check, unknown_profile
from gpufleet.mig.repack import FleetGpu
from gpufleet.spec.types import StrictModel, invalid

MAX_GPUS_PER_HOST = 64  # GPU indices 0-63: well above the 8 or 16 GPUs of today's largest hosts
_RANGE = re.compile(r"(?P<pre>[^\[\]]*)\[(?P<first>\d{1,9})-(?P<last>\d{1,9})\](?P<post>[^\[\]]*)")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?")


def _gpus(v: Any) -> int | list[int]:
    """GPUs per host (indices 0 to N-1), or a list of GPU indices."""
    what = f"the GPUs per host (1 to {MAX_GPUS_PER_HOST}) or a list of GPU indices (0 to {MAX_GPUS_PER_HOST - 1})"
    if isinstance(v, int) and not isinstance(v, bool):
        if not 1 <= v <= MAX_GPUS_PER_HOST:
            raise invalid(f"{v}: give {what}")
        return v
    if isinstance(v, list) and v and all(isinstance(k, int) and not isinstance(k, bool) for k in v):
        if bad := [k for k in v if not 0 <= k < MAX_GPUS_PER_HOST]:
            raise invalid(f"GPU index {bad[0]}: give {what}")
        return list(v)
    raise invalid(f"give {what}, not {str(v)[:40]!r}")


def _hosts(v: Any) -> str | list[str]:
    """A host name or range, or a non-empty list of them."""
    if isinstance(v, str) or (isinstance(v, list) and v and all(isinstance(h, str) for h in v)):
        return v
    raise invalid(f"give a host name, a range like 'gpu-a[01-40]', or a non-empty list of them, not {str(v)[:40]!r}")


class FleetEntry(StrictModel):
    gpu: str
    hosts: Annotated[str | list[str], PlainValidator(_hosts, json_schema_input_type=str | list[str])]
    gpus: Annotated[int | list[int], PlainValidator(_gpus, json_schema_input_type=int | list[int])]
    profiles: dict[str, Annotated[int, Field(ge=0)]]


class FleetFile(StrictModel):
    fleet: list[FleetEntry] = Field(min_length=1)


@dataclass
class ModelFleet:
    """The GPUs of one model in the fleet, in file order."""

    gpu: Gpu
    gpus: list[FleetGpu]


@dataclass
class LoadedFleet:
    file: str
    models: list[ModelFleet]
    diagnostics: list[Diagnostic]

    @property
    def ok(self) -> bool:
        return not self.diagnostics


def expand_hosts(pattern: str) -> list[str]:
    """``gpu-a[01-03]`` -> ``gpu-a01, gpu-a02, gpu-a03``; a plain name is itself. ValueError with the reason."""
    if "[" not in pattern and "]" not in pattern:
        names = [pattern]
    else:
        m = _RANGE.fullmatch(pattern)
        if m is None:
            raise ValueError(f"{pattern!r}: write one numbered range, e.g. 'gpu-a[01-40]'")
        first, last = int(m["first"]), int(m["last"])
        if last < first:
            raise ValueError(f"{pattern!r}: the range runs from {first} down to {last}; write [FIRST-LAST]")
        if last - first + 1 > MAX_FLEET_GPUS:
            raise ValueError(f"{pattern!r}: {last - first + 1:,} hosts; a fleet file holds at most {MAX_FLEET_GPUS:,}")
        width = len(m["first"])
        names = [f"{m['pre']}{i:0{width}d}{m['post']}" for i in range(first, last + 1)]
    for name in (names[0], names[-1]):
        if not _HOST.fullmatch(name):
            raise ValueError(
                f"{name[:80]!r} is not a host name (letters, digits, '.', '_', '-', beginning and ending with a"
                " letter or digit, at most 253 characters)"
            )
    return names


def _resolve(parsed: FleetFile, catalog: Catalog) -> tuple[list[ModelFleet], list[Finding]]:
    findings: list[Finding] = []
    models: dict[str, ModelFleet] = {}
    owner: dict[tuple[str, int], int] = {}  # GPU -> the entry listing it
    host_model: dict[str, tuple[str, int]] = {}  # host -> its GPU model and the entry that said so
    total = 0
    for i, entry in enumerate(parsed.fleet):
        path = ("fleet", i)
        gpu = mig_gpu(catalog, entry.gpu, (*path, "gpu"), findings)
        if gpu is None:
            continue
        bad = False
        for name in entry.profiles:
            if gpu.mig.profile(name) is None:
                message = unknown_profile(gpu, name, catalog.mig_profile_owners(name))
                findings.append(Finding((*path, "profiles", name), message))
                bad = True
        if bad:
            continue
        counts = {name: c for name, c in entry.profiles.items() if c}
        if counts and not (result := check(gpu, counts)).fits:
            findings.append(Finding((*path, "profiles"), f"does not fit one {gpu.name}: {result.reason}"))
            continue
        layout = as_layout(counts, gpu.mig)
        patterns = [entry.hosts] if isinstance(entry.hosts, str) else entry.hosts
        hosts: list[str] = []
        for j, pattern in enumerate(patterns):
            where = (*path, "hosts") if isinstance(entry.hosts, str) else (*path, "hosts", j)
            try:
                hosts.extend(expand_hosts(pattern))
            except ValueError as exc:
                findings.append(Finding(where, str(exc)))
        indices = list(range(entry.gpus)) if isinstance(entry.gpus, int) else entry.gpus
        if len(set(indices)) != len(indices):
            twice = next(k for k in indices if indices.count(k) > 1)
            findings.append(Finding((*path, "gpus"), f"GPU index {twice} is listed twice"))
            continue
        total += len(hosts) * len(indices)
        if total > MAX_FLEET_GPUS:
            findings.append(
                Finding((*path, "hosts"), f"the fleet passes {MAX_FLEET_GPUS:,} GPUs (the largest fleets); check it")
            )
            break
        other = next((h for h in hosts if host_model.setdefault(h, (gpu.name, i))[0] != gpu.name), None)
        if other is not None:
            name, first = host_model[other]
            message = f"{other} has {name} GPUs (fleet[{first}]); a host holds one GPU model"
            findings.append(Finding((*path, "hosts"), message))
            continue
        model = models.setdefault(gpu.name, ModelFleet(gpu, []))
        clash: tuple[str, int, int] | None = None
        for host in hosts:
            for k in indices:
                first = owner.setdefault((host, k), i)
                if first != i and clash is None:
                    clash = (host, k, first)
                model.gpus.append(FleetGpu(host, k, layout))
        if clash is not None:
            host, k, first = clash
            findings.append(Finding((*path, "hosts"), f"GPU {k} of {host} is also listed in fleet[{first}]"))
        if len(set(hosts)) != len(hosts):
            twice_host = next(h for h, n in Counter(hosts).items() if n > 1)
            findings.append(Finding((*path, "hosts"), f"host {twice_host!r} is listed twice"))
    return list(models.values()), findings


def load_current(path: str | FsPath, catalog: Catalog) -> LoadedFleet:
    """Read and validate a fleet file; every error as ``file:line: key.path: message``."""
    file = str(path)
    parsed, locator, diagnostics = read_model(file, FleetFile, "a fleet file is a mapping with a 'fleet:' list")
    if parsed is None or locator is None:
        return LoadedFleet(file, [], diagnostics)
    models, findings = _resolve(parsed, catalog)
    diagnostics = located(findings, locator, file)
    return LoadedFleet(file, models if not diagnostics else [], diagnostics)
