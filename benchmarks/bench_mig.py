"""MIG packing of a 10,000-GPU mixed demand (targets: under 2 s, within 1% of the proven lower bound)."""

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
    return [
        Figure("MIG pack 10k-GPU mixed demand: time", seconds, "s", 2.0),
        Figure("MIG pack 10k-GPU mixed demand: GPUs used", result.gpus, ""),
        Figure("MIG pack 10k-GPU mixed demand: lower bound", result.lower_bound, ""),
        Figure("MIG pack 10k-GPU mixed demand: gap to bound", gap_pct, "%", 1.0),
    ]
