"""`gpufleet validate` of the five example stacks, as a whole process (target: under 1 s)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from benchmarks.common import REPO, Figure, time_call, time_process

STACKS = ["dev-westeurope", "staging-westeurope", "prod-westeurope", "prod-eastus", "lab-local"]


def run() -> list[Figure]:
    cli = Path(sys.executable).with_name("gpufleet")
    argv = [str(cli)] if cli.exists() else [sys.executable, "-m", "gpufleet"]
    times = time_process([*argv, "validate", *STACKS])
    from gpufleet.catalog import load_catalog
    from gpufleet.spec.load import load_stack

    start_catalog = time_call(lambda: (load_catalog.cache_clear(), load_catalog()), runs=5)
    catalog = load_catalog()
    per_stack = time_call(lambda: [load_stack(REPO / f"Pulumi.{s}.yaml", catalog=catalog) for s in STACKS]) / len(
        STACKS
    )
    return [
        Figure("validate 5 example stacks, whole process (median)", statistics.median(times), "s", 1.0),
        Figure("validate 5 example stacks, whole process (max of 7)", max(times), "s"),
        Figure("catalog load, in process", start_catalog * 1000, "ms"),
        Figure("one stack validated, in process (warm)", per_stack * 1000, "ms"),
    ]
