"""A fleet-wide MIG demand file (input of ``gpufleet mig pack``), validated like stack files.

```yaml
demand:
  - gpu: H100-SXM5-80GB              # catalog name, PCI id or nvidia-smi name
    profiles: {1g.10gb: 300, 3g.40gb: 120}
  - gpu: NVIDIA A100-SXM4-40GB
    memory:                          # N instances with at least X GiB usable each
      - {count: 50, min_gib: 18}
```

A memory demand becomes instances of the cheapest profile (fewest memory slices, then compute slices) whose
usable memory is at least ``min_gib`` (NVIDIA's published figure, or a conservative estimate: see
:func:`gpufleet.mig.usable_gib`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Annotated

from pydantic import Field, model_validator

from gpufleet.catalog import Catalog, Gpu
from gpufleet.common.diagnostics import Diagnostic, Finding
from gpufleet.common.yamldoc import located, read_model
from gpufleet.mig import MigError, profile_for_memory, usable_gib
from gpufleet.mig.placement import unknown_profile
from gpufleet.spec.types import StrictModel, invalid

# The most GPUs of one model a demand may need. The largest GPU fleets hold about 100,000 GPUs; a demand beyond
# that is a typo (and would make pack run for minutes and hold every GPU's layout in memory).
MAX_FLEET_GPUS = 100_000


class MemoryDemand(StrictModel):
    count: int = Field(ge=1)
    min_gib: float = Field(gt=0)


class DemandEntry(StrictModel):
    gpu: str
    profiles: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    memory: list[MemoryDemand] = Field(default_factory=list)

    @model_validator(mode="after")
    def _something(self) -> DemandEntry:
        if not self.profiles and not self.memory:
            raise invalid("give profiles (instances per profile) or memory (instances with at least N GiB)")
        return self


class DemandFile(StrictModel):
    demand: list[DemandEntry] = Field(min_length=1)


@dataclass
class ModelDemand:
    """One GPU model's demand, in instances per profile, with how memory demands were translated."""

    gpu: Gpu
    profiles: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)


@dataclass
class LoadedDemand:
    file: str
    models: list[ModelDemand]
    diagnostics: list[Diagnostic]

    @property
    def ok(self) -> bool:
        return not self.diagnostics


def mig_gpu(catalog: Catalog, name: str, path: tuple[str | int, ...], findings: list[Finding]) -> Gpu | None:
    """The MIG-capable catalog GPU ``name`` names, or None with the finding why not (unknown, or no MIG) added at
    ``path``: how the demand and fleet files read an entry's ``gpu``."""
    gpu = catalog.find_gpu(name)
    if gpu is None:
        findings.append(Finding(path, f"unknown GPU {name!r}; {catalog.gpu_hint(name)}"))
    elif gpu.mig is None:
        findings.append(Finding(path, catalog.no_mig_reason(gpu)))
        return None
    return gpu


def _resolve(parsed: DemandFile, catalog: Catalog) -> tuple[list[ModelDemand], list[Finding]]:
    findings: list[Finding] = []
    models: dict[str, ModelDemand] = {}
    first: dict[str, tuple[str | int, ...]] = {}
    for i, entry in enumerate(parsed.demand):
        path = ("demand", i)
        gpu = mig_gpu(catalog, entry.gpu, (*path, "gpu"), findings)
        if gpu is None:
            continue
        model = models.setdefault(gpu.name, ModelDemand(gpu))
        for name, count in entry.profiles.items():
            if gpu.mig.profile(name) is None:
                message = unknown_profile(gpu, name, catalog.mig_profile_owners(name))
                findings.append(Finding((*path, "profiles", name), message))
            else:
                model.profiles[name] += count
        for j, want in enumerate(entry.memory):
            try:
                profile = profile_for_memory(gpu, want.min_gib)
            except MigError as exc:
                findings.append(Finding((*path, "memory", j, "min_gib"), str(exc)))
                continue
            model.profiles[profile.name] += want.count
            gib, published = usable_gib(gpu, profile)
            basis = "" if published else ", estimated: NVIDIA publishes no figure"
            model.notes.append(f"{want.count} x >= {want.min_gib:g} GiB -> {profile.name} ({gib:g} GiB usable{basis})")
        first.setdefault(gpu.name, path)
    for name, model in models.items():
        need = gpus_needed(model)
        if need > MAX_FLEET_GPUS:
            findings.append(
                Finding(
                    first[name],
                    f"the demand for {name} needs at least {need:,} GPUs; a demand may need at most"
                    f" {MAX_FLEET_GPUS:,} GPUs of one model (the size of the largest fleets): check the counts",
                )
            )
    return list(models.values()), findings


def gpus_needed(model: ModelDemand) -> int:
    """A lower bound on the GPUs a model's demand needs: by compute slices, memory slices and each profile's
    per-GPU maximum."""
    geometry = model.gpu.mig
    if geometry is None or not model.profiles:
        return 0
    profiles = [(geometry.by_name[name], count) for name, count in model.profiles.items()]
    memory = sum(p.memory_slices * c for p, c in profiles)
    compute = sum(p.compute_slices * c for p, c in profiles)
    return max(
        -(-memory // geometry.memory_slices),
        -(-compute // geometry.compute_slices),
        *(-(-c // p.max_count) for p, c in profiles),
    )


def load_demand(path: str | FsPath, catalog: Catalog) -> LoadedDemand:
    """Read and validate a demand file; every error as ``file:line: key.path: message``."""
    file = str(path)
    parsed, locator, diagnostics = read_model(file, DemandFile, "a demand file is a mapping with a 'demand:' list")
    if parsed is None or locator is None:
        return LoadedDemand(file, [], diagnostics)
    models, findings = _resolve(parsed, catalog)
    diagnostics = located(findings, locator, file)
    return LoadedDemand(file, models if not diagnostics else [], diagnostics)
