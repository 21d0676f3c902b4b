"""Sizing by memory: the smallest MIG profile of a model with at least some usable memory."""

from __future__ import annotations

from gpufleet.catalog import Gpu, MigProfile
from gpufleet.mig.placement import MigError

GIB_PER_GB = 1e9 / 2**30


def usable_gib(gpu: Gpu, profile: MigProfile) -> tuple[float, bool]:
    """Usable memory of an instance, and whether it is published (True) or estimated (False).

    Estimate, where NVIDIA publishes no figure: the model's lowest published GiB per memory slice times the
    profile's slices, or, with no published figure at all, the GB in the profile's name converted to GiB."""
    if profile.usable_gib is not None:
        return profile.usable_gib, True
    assert gpu.mig is not None
    known = [p.usable_gib / p.memory_slices for p in gpu.mig.profiles if p.usable_gib is not None]
    if known:
        return round(min(known) * profile.memory_slices, 2), False
    nominal = float(profile.name.split(".")[1].split("gb")[0])
    return round(nominal * GIB_PER_GB, 2), False


def profile_for_memory(gpu: Gpu, min_gib: float) -> MigProfile:
    """The cheapest profile (fewest memory slices, then compute slices; a plain one: no +me, +me.all, -me or
    +gfx variant) whose usable memory is at least ``min_gib``."""
    if gpu.mig is None:
        raise MigError(f"{gpu.name} ({gpu.architecture}) has no MIG")
    fitting = [p for p in gpu.mig.profiles if p.plain and usable_gib(gpu, p)[0] >= min_gib]
    if not fitting:
        largest = max(usable_gib(gpu, p)[0] for p in gpu.mig.profiles)
        raise MigError(f"no MIG instance of {gpu.name} has {min_gib:g} GiB usable; the largest has {largest:g} GiB")
    return min(fitting, key=lambda p: (p.memory_slices, p.compute_slices))
