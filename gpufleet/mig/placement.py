"""One GPU: does a set of MIG instances fit, where (an exhaustive search of start slices), and its picture.

Placement rules (NVIDIA MIG User Guide, "Supported MIG Profiles"): see :mod:`gpufleet.mig`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.catalog import Gpu, MigGeometry, MigProfile
from gpufleet.common.diagnostics import did_you_mean

Layout = tuple[tuple[str, int], ...]  # ((profile, count), ...), largest instances first


class MigError(ValueError):
    """A request the planner cannot serve (a GPU without MIG, a profile of another model...)."""


@dataclass(frozen=True)
class Placement:
    profile: str
    start: int  # first memory slice
    size: int  # memory slices
    compute_slices: int

    def to_dict(self) -> dict[str, object]:
        return {"profile": self.profile, "start": self.start, "size": self.size}


@dataclass(frozen=True)
class CheckResult:
    """Whether a multiset of instances fits one GPU; the placement when it does, the reason when it does not."""

    gpu: str
    fits: bool
    placements: tuple[Placement, ...] = ()
    reason: str | None = None
    # when it does not fit for lack of room: the largest subset that was placed, and what was left over
    partial: tuple[Placement, ...] = ()
    unplaced: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "gpu": self.gpu,
            "fits": self.fits,
            "placements": [p.to_dict() for p in self.placements],
            "reason": self.reason,
        }


def as_layout(counts: Mapping[str, int], geometry: MigGeometry) -> Layout:
    """A canonical layout: largest instances first (``3g.40gb x2 + 1g.10gb``)."""

    def key(item: tuple[str, int]) -> tuple[int, int, bool, str]:
        p = geometry.by_name[item[0]]
        return (-p.compute_slices, -p.memory_slices, p.media_extensions, p.name)

    return tuple(sorted(((n, c) for n, c in counts.items() if c), key=key))


def layout_str(layout: Layout) -> str:
    return " + ".join(f"{name} x{count}" if count > 1 else name for name, count in layout)


# -- one GPU: exact placement --------------------------------------------------------------------------------


def unknown_profile(gpu: Gpu, name: str, owners: Sequence[str]) -> str:
    assert gpu.mig is not None
    where = f" (it is a profile of {', '.join(owners)})" if owners else ""
    return f"{name!r} is not a MIG profile of {gpu.name}{where}; " + did_you_mean(name, gpu.mig.by_name, limit=20)


def _search(instances: Sequence[MigProfile], geometry: MigGeometry) -> tuple[list[int] | None, list[int]]:
    """Depth-first search of start positions; returns (starts, best partial starts). Identical consecutive
    instances take increasing starts, so permutations of equal instances are not searched twice."""
    n = len(instances)
    starts: list[int] = [-1] * n
    best: list[int] = []

    def place(i: int, used: int) -> bool:
        nonlocal best
        if i == n:
            return True
        prof = instances[i]
        lower = starts[i - 1] if i and instances[i - 1].name == prof.name else -1
        for s in prof.starts:
            if s <= lower:
                continue
            mask = ((1 << prof.memory_slices) - 1) << s
            if s + prof.memory_slices <= geometry.memory_slices and not used & mask:
                starts[i] = s
                if i + 1 > len(best):
                    best = starts[: i + 1]
                if place(i + 1, used | mask):
                    return True
        starts[i] = -1
        return False

    return (list(starts) if place(0, 0) else None), best


def check(
    gpu: Gpu, profiles: Mapping[str, int] | Iterable[str], owners: Mapping[str, Sequence[str]] | None = None
) -> CheckResult:
    """Does this multiset of instances fit one ``gpu``? ``profiles`` maps profile -> count (or lists names).

    ``owners`` optionally names, per unknown profile, the models that have it (for the message)."""
    counts = Counter(profiles) if not isinstance(profiles, Mapping) else Counter(dict(profiles))
    if gpu.mig is None:
        return CheckResult(gpu.name, False, reason=f"{gpu.name} ({gpu.architecture}) has no MIG")
    geometry = gpu.mig
    for name, count in counts.items():
        if count < 0:
            return CheckResult(gpu.name, False, reason=f"{name}: a count is at least 0, not {count}")
        prof = geometry.profile(name)
        if prof is None:
            return CheckResult(gpu.name, False, reason=unknown_profile(gpu, name, (owners or {}).get(name, ())))
        if count > prof.max_count:
            return CheckResult(
                gpu.name, False, reason=f"at most {prof.max_count} x {name} fit one {gpu.name}, not {count}"
            )
    chosen = [(geometry.by_name[n], c) for n, c in counts.items() if c]
    desc = layout_str(as_layout(counts, geometry))
    # Largest first (fewest starts first among equals): the search fails fast on impossible layouts.
    instances = sorted(
        (p for p, c in chosen for _ in range(c)), key=lambda p: (-p.memory_slices, len(p.starts), p.name)
    )
    starts, best = _search(instances, geometry)
    placed = starts if starts is not None else best
    partial = tuple(
        Placement(p.name, s, p.memory_slices, p.compute_slices) for p, s in zip(instances, placed, strict=False)
    )
    unplaced = tuple(p.name for p in instances[len(placed) :])

    def refuse(reason: str) -> CheckResult:
        return CheckResult(gpu.name, False, reason=reason, partial=partial, unplaced=unplaced)

    compute = sum(p.compute_slices * c for p, c in chosen)
    if compute > geometry.compute_slices:
        return refuse(f"{desc} need {compute} compute slices; one {gpu.name} has {geometry.compute_slices}")
    memory = sum(p.memory_slices * c for p, c in chosen)
    if memory > geometry.memory_slices:
        return refuse(f"{desc} need {memory} memory slices; one {gpu.name} has {geometry.memory_slices}")
    media = sum(c for p, c in chosen if p.media_extensions)
    if media > geometry.media_extension_instances:
        return refuse(
            f"{desc} ask for {media} instances with media extensions; one {gpu.name} has media engines"
            f" for {geometry.media_extension_instances}"
        )
    for p, _ in chosen:
        if p.all_media_engines:
            needing = sorted({q.name for q, _ in chosen if q is not p and not q.no_media_engines})
            if needing:
                return refuse(
                    f"{p.name} takes every media engine of the GPU, so the other instances must be -me profiles"
                    f" (no media engines), not {', '.join(needing)}"
                )
    if starts is None:
        done = ", ".join(f"{p.profile}@{p.start}" for p in partial) or "nothing"
        return refuse(
            f"{desc} cannot be placed without overlapping memory slices: after {done}, no allowed start is free"
            f" for {unplaced[0]} (starts {geometry.by_name[unplaced[0]].placement})"
        )
    return CheckResult(gpu.name, True, tuple(sorted(partial, key=lambda p: p.start)))


def diagram(gpu: Gpu, result: CheckResult) -> list[str]:
    """The memory slices of one GPU with each instance's span, e.g. for ``3g.40gb x2 + 1g.10gb``::

    memory slice   0   1   2   3   4   5   6   7
    3g.40gb       [==============]
    3g.40gb                       [==============]
    1g.10gb       no free start in {0,1,2,3,4,5,6}:1
    """
    assert gpu.mig is not None
    geometry = gpu.mig
    width = max([len("memory slice"), *(len(p.profile) for p in (*result.partial, *result.placements))]) + 2
    width = max(width, *(len(n) + 2 for n in result.unplaced)) if result.unplaced else width
    lines = [" " * width + "".join(f"{i:<4}" for i in range(geometry.memory_slices)).rstrip()]
    lines[0] = "memory slice".ljust(width) + lines[0][width:]
    for p in result.placements or result.partial:
        bar = "[" + "=" * (4 * p.size - 3) + "]"
        lines.append(p.profile.ljust(width) + " " * (4 * p.start) + bar)
    for name in result.unplaced:
        lines.append(name.ljust(width) + f"no free start in {geometry.by_name[name].placement}")
    used = sum(p.compute_slices for p in (result.placements or result.partial))
    used += sum(geometry.by_name[n].compute_slices for n in result.unplaced)
    lines.append(f"compute slices: {used} of {geometry.compute_slices}")
    return lines
