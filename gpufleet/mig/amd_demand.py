"""An AMD Instinct partition demand file (input of ``gpufleet amd pack``), validated like stack files and ``mig pack``'s
demand (:mod:`gpufleet.mig.demand`): every error at ``file:line: key.path: message``.

```yaml
gpus:
  - model: MI300X                    # catalog name, alias or PCI id of an AMD Instinct GPU
    gpus_per_node: 8
    partitions: {CPX+NPS4: 40, SPX+NPS1: 3}   # logical GPUs per compute x memory pair
    memory:                          # logical GPUs with at least N GiB each
      - {memory_gib: 20, count: 40}
      - {memory_gib: 90, count: 4, nps: NPS2}   # on nodes of that NPS mode
    mix_compute: true                # compute modes may share a node of one NPS mode (default)
```

A memory demand takes the smallest partition that holds it (:func:`gpufleet.mig.amd_partitions.pairs_for_memory`);
its NPS mode is ``nps`` when given, else the packer's choice among the modes that partition runs with
(:mod:`gpufleet.mig.amd_pack`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path as FsPath
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from gpufleet.catalog import AmdMemoryMode, Catalog, Gpu
from gpufleet.common.diagnostics import Diagnostic, Finding
from gpufleet.common.yamldoc import located, read_model
from gpufleet.mig.amd_pack import AmdDemand, FlexibleDemand, gpus_per_pair
from gpufleet.mig.amd_partitions import (
    PairSyntaxError,
    memory_mode_problem,
    no_partitions_reason,
    pair_problem,
    pairs_for_memory,
    parse_pair,
)
from gpufleet.mig.demand import MAX_FLEET_GPUS
from gpufleet.spec.types import StrictModel, invalid


def _logical_gpus(v: int) -> int:
    """A count of logical GPUs: 1 or more."""
    if v < 1:
        raise invalid(f"{v} logical GPUs: ask for 1 or more, or leave it out")
    return v


class MemoryDemand(StrictModel):
    memory_gib: float = Field(gt=0, description="memory each logical GPU holds at least, GiB")
    count: Annotated[int, AfterValidator(_logical_gpus)] = Field(description="how many such logical GPUs")
    nps: AmdMemoryMode | None = Field(None, description="the NPS mode of their nodes; default: the packer's choice")


class ModelDemand(StrictModel):
    model: str
    gpus_per_node: int = Field(ge=1, le=64, description="GPUs of one node (8 on MI300X-MI355X platforms)")
    partitions: dict[str, Annotated[int, AfterValidator(_logical_gpus)]] = Field(
        default_factory=dict, description="logical GPUs per pair, e.g. CPX+NPS4: 40"
    )
    memory: list[MemoryDemand] = Field(default_factory=list)
    mix_compute: bool = True

    @model_validator(mode="after")
    def _something(self) -> ModelDemand:
        if not self.partitions and not self.memory:
            raise invalid("give partitions (logical GPUs per pair, e.g. CPX+NPS4: 40) or memory (memory_gib, count)")
        return self


class DemandFile(StrictModel):
    gpus: list[ModelDemand] = Field(min_length=1)


@dataclass
class LoadedAmdDemand:
    file: str
    demands: list[AmdDemand]
    diagnostics: list[Diagnostic]

    @property
    def ok(self) -> bool:
        return not self.diagnostics


def amd_gpu(catalog: Catalog, name: str, path: tuple[str | int, ...], findings: list[Finding]) -> Gpu | None:
    """The partitionable AMD GPU ``name`` names, or None with the finding why not at ``path``: unknown (with the
    closest name of its vendor), an NVIDIA GPU (``mig pack``'s), an AMD GPU without partitions."""
    gpu = catalog.find_gpu(name)
    if gpu is None:
        findings.append(Finding(path, f"unknown GPU {name!r}; {catalog.gpu_hint(name)}"))
    elif gpu.vendor != "amd":
        findings.append(Finding(path, f"{gpu.name} is an NVIDIA GPU: pack its MIG demand with gpufleet mig pack"))
    elif gpu.partitions is None:
        findings.append(Finding(path, no_partitions_reason(gpu)))
    else:
        return gpu
    return None


def _pairs(entry: ModelDemand, gpu: Gpu, path: tuple[str | int, ...], findings: list[Finding]) -> dict[str, int]:
    """The entry's ``partitions``: logical GPUs per pair name (``CPX+NPS4``), each pair checked."""
    counts: dict[str, int] = {}
    for key, count in entry.partitions.items():
        try:
            compute, memory = parse_pair(key)
        except PairSyntaxError as exc:
            findings.append(Finding((*path, "partitions", key), str(exc)))
            continue
        reason = pair_problem(gpu, compute, memory)
        if reason is not None:
            findings.append(Finding((*path, "partitions", key), reason))
            continue
        name = f"{compute}+{memory}"
        counts[name] = counts.get(name, 0) + count
    return counts


def _flexible(
    entry: ModelDemand, gpu: Gpu, path: tuple[str | int, ...], findings: list[Finding]
) -> list[FlexibleDemand]:
    """The entry's memory demands: each the smallest partition that holds it (with ``nps``: of that NPS mode), in
    the NPS modes it may take."""
    assert gpu.partitions is not None
    flexible = []
    for j, want in enumerate(entry.memory):
        if want.nps is not None and (reason := memory_mode_problem(gpu, want.nps)) is not None:
            findings.append(Finding((*path, "memory", j, "nps"), reason))
            continue
        fits = [p for p in pairs_for_memory(gpu, want.memory_gib) if want.nps in (None, p.memory)]
        if not fits:
            modes = [p for p in gpu.partitions.pairs if want.nps in (None, p.memory)]
            largest = max(modes, key=lambda p: (p.memory_gib, -len(p.name)))
            where = f" in {want.nps}" if want.nps else ""
            findings.append(
                Finding(
                    (*path, "memory", j, "memory_gib"),
                    f"no partition of {gpu.name}{where} holds {want.memory_gib:g} GiB: the largest, {largest.name}, has"
                    f" {largest.memory_gib:g} GiB",
                )
            )
            continue
        smallest = tuple(p for p in fits if p.logical_gpus == fits[0].logical_gpus)
        label = f"{want.count} x >= {want.memory_gib:g} GiB" + (f" on {want.nps}" if want.nps else "")
        flexible.append(FlexibleDemand(want.count, smallest, label))
    return flexible


def _resolve(parsed: DemandFile, catalog: Catalog) -> tuple[list[AmdDemand], list[Finding]]:
    """Each model's demand (entries of one model merged), and every finding."""
    findings: list[Finding] = []
    demands: dict[str, AmdDemand] = {}
    first: dict[str, tuple[str | int, ...]] = {}
    for i, entry in enumerate(parsed.gpus):
        path = ("gpus", i)
        gpu = amd_gpu(catalog, entry.model, (*path, "model"), findings)
        if gpu is None:
            continue
        demand = AmdDemand(
            gpu,
            entry.gpus_per_node,
            _pairs(entry, gpu, path, findings),
            tuple(_flexible(entry, gpu, path, findings)),
            entry.mix_compute,
        )
        before = demands.get(gpu.name)
        if before is None:
            first[gpu.name], demands[gpu.name] = path, demand
        elif (finding := _other_shape(before, demand, first[gpu.name], path)) is not None:
            findings.append(finding)
        else:
            pairs = Counter(before.partitions) + Counter(demand.partitions)
            demands[gpu.name] = replace(before, partitions=dict(pairs), flexible=before.flexible + demand.flexible)
    for name, demand in demands.items():
        need = sum(gpus_per_pair(demand.gpu, demand.partitions).values())
        need += sum(-(-f.count // f.candidates[0].logical_gpus) for f in demand.flexible)
        if need > MAX_FLEET_GPUS:
            findings.append(
                Finding(
                    first[name],
                    f"the demand for {name} needs at least {need:,} GPUs; a demand may need at most"
                    f" {MAX_FLEET_GPUS:,} GPUs of one model (the size of the largest fleets): check the counts",
                )
            )
    return list(demands.values()), findings


def _other_shape(
    before: AmdDemand, demand: AmdDemand, first: tuple[str | int, ...], path: tuple[str | int, ...]
) -> Finding | None:
    """A second entry of a model whose nodes differ from the first's (one node shape per model), or None."""
    if before.gpus_per_node != demand.gpus_per_node:
        key, was = "gpus_per_node", f"nodes of {before.gpus_per_node} GPUs"
    elif before.mix_compute != demand.mix_compute:
        key, was = "mix_compute", f"mix_compute: {str(before.mix_compute).lower()}"
    else:
        return None
    return Finding(
        (*path, key),
        f"{demand.gpu.name} is demanded at gpus[{first[1]}] with {was}: a model's nodes have one shape; give both"
        " entries the same gpus_per_node and mix_compute, or merge them",
    )


def load_amd_demand(path: str | FsPath, catalog: Catalog) -> LoadedAmdDemand:
    """Read and validate an AMD partition demand file; every error as ``file:line: key.path: message``."""
    file = str(path)
    parsed, locator, diagnostics = read_model(
        file, DemandFile, "an AMD partition demand file is a mapping with a 'gpus:' list"
    )
    if parsed is None or locator is None:
        return LoadedAmdDemand(file, [], diagnostics)
    demands, findings = _resolve(parsed, catalog)
    diagnostics = located(findings, locator, file)
    return LoadedAmdDemand(file, demands if not diagnostics else [], diagnostics)
