"""MIG packing of a 10,000-GPU mixed demand (targets: under 2 s, within 1% of the proven lower bound), and the
repack of that fleet after a 5% demand change (targets: under 2 s, changed GPUs within 1% of the lower bound
stated in gpufleet.mig.repack)."""

from __future__ import annotations

import random
import time

from benchmarks.common import Figure

# GPU models and their share of the fleet; each model's demand is a random mix of its profiles, scaled so
# that the fleet needs about 10,000 GPUs (seeded: the same demand every run).
MIX = {"H100-SXM5-80GB": 0.4, "A100-SXM4-40GB": 0.2, "H200-SXM-141GB": 0.15, "A30-24GB": 0.1, "B200-180GB": 0.15}
TARGET_GPUS = 10_000


def demand() -> list:
    from gpufleet.catalog import load_catalog

    catalog = load_catalog()
    rng = random.Random(20261121)
    out = []
    for name, share in MIX.items():
        gpu = catalog.gpu(name)
        weights = {p.name: rng.random() for p in gpu.mig.profiles}
        # compute slices the model's share of GPUs offers, spread by weight over the profiles
        budget = share * TARGET_GPUS * gpu.mig.compute_slices
        total_weight = sum(w * gpu.mig.by_name[n].compute_slices for n, w in weights.items())
        out.append((gpu, {n: max(1, round(budget * w / total_weight)) for n, w in weights.items()}))
    return out


def run() -> list[Figure]:
    from gpufleet import mig

    demands = demand()
    start = time.perf_counter()
    result = mig.pack(demands)
    seconds = time.perf_counter() - start
    instances = sum(sum(d.values()) for _, d in demands)
    gap_pct = 100 * result.gap / result.lower_bound
    layouts = sum(len(m.layouts) for m in result.models)
    print(f"   {instances} instances on {len(demands)} GPU models -> {result.gpus} GPUs, {layouts} layouts")
    figures = [
        Figure("MIG pack 10k-GPU mixed demand: time", seconds, "s", 2.0),
        Figure("MIG pack 10k-GPU mixed demand: GPUs used", result.gpus, ""),
        Figure("MIG pack 10k-GPU mixed demand: lower bound", result.lower_bound, ""),
        Figure("MIG pack 10k-GPU mixed demand: gap to bound", gap_pct, "%", 1.0),
    ]
    return figures + run_repack()


def changed_demand(demands: list, change: float = 0.05) -> list:
    """Each profile's demand moved by ``change`` up or down (seeded: the same every run)."""
    rng = random.Random(20261125)
    return [(gpu, {n: round(c * rng.choice((1 - change, 1 + change))) for n, c in d.items()}) for gpu, d in demands]


def current_fleet(demands: list) -> list:
    """The fleet the packing of ``demands`` builds: its layouts on 8-GPU hosts, in a shuffled order."""
    from gpufleet import mig
    from gpufleet.mig.repack import FleetGpu

    rng = random.Random(20261126)
    gpus = {gpu.name: gpu for gpu, _ in demands}
    fleet = []
    for model in mig.pack(demands).models:
        layouts = [lay for lay, n in model.layouts for _ in range(n)]
        rng.shuffle(layouts)
        host = model.gpu.lower()
        fleet.append((gpus[model.gpu], [FleetGpu(f"{host}-{i // 8:04d}", i % 8, lay) for i, lay in enumerate(layouts)]))
    return fleet


def run_repack() -> list[Figure]:
    from gpufleet.mig.repack import repack

    demands = demand()
    fleet = current_fleet(demands)
    new = changed_demand(demands)
    start = time.perf_counter()
    result = repack(fleet, new)
    seconds = time.perf_counter() - start
    gpus = sum(len(members) for _, members in fleet)
    gap_pct = 100 * (result.changed - result.lower_bound) / result.lower_bound if result.lower_bound else 0.0
    print(
        f"   {gpus} GPUs, each profile's demand moved by 5%: {result.changed} changed, {result.added} added,"
        f" lower bound {result.lower_bound} changed ({'optimal' if result.proven else 'best found'})"
    )
    return [
        Figure("MIG repack 10k GPUs, 5% demand change: time", seconds, "s", 2.0),
        Figure("MIG repack 10k GPUs, 5% demand change: changed GPUs", result.changed, ""),
        Figure("MIG repack 10k GPUs, 5% demand change: lower bound", result.lower_bound, ""),
        Figure("MIG repack 10k GPUs, 5% demand change: added GPUs", result.added, ""),
        Figure("MIG repack 10k GPUs, 5% demand change: gap to bound", gap_pct, "%", 1.0),
    ]
