"""The MIG planner: exact placements on one GPU, every maximal layout of a model, and fleet-wide packing.

Pure functions over the catalog (:mod:`gpufleet.catalog`), no I/O.

Placement rules (NVIDIA MIG User Guide, "Supported MIG Profiles"): an instance occupies ``memory_slices``
consecutive memory slices starting at one of its profile's allowed starts; instances never overlap on the
memory-slice axis; their compute slices add up to at most the GPU's; at most ``media_extension_instances``
instances carry media extensions (+me, +me.all: the GPU has one OFA); an instance with every media engine
(``+me.all``, RTX PRO 6000 Blackwell) shares the GPU only with ``-me`` instances, which have none. ``check``
searches every placement exhaustively (a few hundred nodes at most), so it never wrongly rejects a layout a greedy
left-to-right placement would miss (3 x 1g.20gb + 2 x 1g.10gb on an H100 needs a 1g.20gb at start 6). For NVIDIA's
7x8, 4x4 and RTX PRO 6000 (4 compute slices on a 12-unit memory grid) geometries every multiset within the max
counts and the slice sums has a placement (the tests check this exhaustively); the search finds it, and keeps the
planner right for a geometry where sums are not enough.

Packing covers a demand (instances per profile, per GPU model) with as few GPUs as possible: the linear
relaxation over maximal layouts gives a proven lower bound (its optimum, rounded up); its solution rounded down,
plus an exact branch-and-bound for the remainder, gives the packing. Small demands are solved exactly by the
same branch-and-bound.
"""

from gpufleet.mig.layouts import feasible_layouts, maximal_layouts
from gpufleet.mig.packing import FleetPack, ModelPack, pack, pack_model
from gpufleet.mig.placement import CheckResult, Layout, MigError, Placement, check, diagram, layout_str
from gpufleet.mig.sizing import profile_for_memory, usable_gib

__all__ = [
    "CheckResult",
    "FleetPack",
    "Layout",
    "MigError",
    "ModelPack",
    "Placement",
    "check",
    "diagram",
    "feasible_layouts",
    "layout_str",
    "maximal_layouts",
    "pack",
    "pack_model",
    "profile_for_memory",
    "usable_gib",
]
