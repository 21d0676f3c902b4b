"""One GPU model: every feasible and every maximal MIG layout (what packing covers a demand with)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from gpufleet.catalog import Gpu
from gpufleet.mig.placement import Layout, MigError, as_layout, check


@lru_cache(maxsize=64)
def feasible_layouts(gpu: Gpu) -> tuple[Layout, ...]:
    """Every non-empty multiset of instances that fits one ``gpu`` (a few hundred at most)."""
    if gpu.mig is None:
        raise MigError(f"{gpu.name} has no MIG")
    geometry = gpu.mig
    profiles = geometry.profiles
    found: list[Layout] = []

    def walk(i: int, counts: dict[str, int], compute: int, memory: int) -> None:
        if i == len(profiles):
            if counts and check(gpu, counts).fits:
                found.append(as_layout(counts, geometry))
            return
        prof = profiles[i]
        for c in range(prof.max_count + 1):
            cc, mm = compute + c * prof.compute_slices, memory + c * prof.memory_slices
            if cc > geometry.compute_slices or mm > geometry.memory_slices:
                break
            if c:
                counts[prof.name] = c
            walk(i + 1, counts, cc, mm)
            counts.pop(prof.name, None)

    walk(0, {}, 0, 0)
    return tuple(found)


def _dominates(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    return a != b and all(a.get(k, 0) >= v for k, v in b.items())


def maximal_layouts(gpu: Gpu, only: Iterable[str] | None = None) -> tuple[Layout, ...]:
    """Layouts to which no further instance can be added (restricted to the profiles in ``only``)."""
    return _maximal(gpu, frozenset(only) if only is not None else None)


@lru_cache(maxsize=512)
def _maximal(gpu: Gpu, only: frozenset[str] | None) -> tuple[Layout, ...]:
    layouts = [lay for lay in feasible_layouts(gpu) if only is None or all(name in only for name, _ in lay)]
    as_dicts = [dict(lay) for lay in layouts]
    return tuple(
        lay for lay, d in zip(layouts, as_dicts, strict=True) if not any(_dominates(other, d) for other in as_dicts)
    )
