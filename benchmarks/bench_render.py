"""`gpufleet render` of every example stack: helm template of the pinned charts, the objects read back and the
scheduling check (target: all example stacks under 3 s together). Charts from $GPUFLEET_CHARTS_DIR, else
../shared/reference/charts, else the helm pull cache."""

from __future__ import annotations

import os
import time

from benchmarks.common import REPO, Figure


def run() -> list[Figure]:
    from gpufleet import charts
    from gpufleet.catalog import load_catalog
    from gpufleet.plan import plan_stack
    from gpufleet.spec import load_stack

    reference = REPO.parent / "shared" / "reference" / "charts"
    directory = charts.charts_dir() if os.environ.get(charts.CHARTS_DIR_ENV) or not reference.is_dir() else reference
    catalog = load_catalog()
    stacks = [load_stack(p).stack for p in sorted(REPO.glob("Pulumi.*-*.yaml"))]
    figures, total = [], 0.0
    for stack in stacks:
        assert stack is not None, "an example stack is invalid: run gpufleet validate"
        start = time.perf_counter()
        result = charts.render(stack, plan_stack(stack, catalog), catalog, directory=directory)
        elapsed = time.perf_counter() - start
        total += elapsed
        assert not result.problems, result.problems
        figures.append(Figure(f"render {stack.name}", elapsed, "s"))
    figures.append(Figure(f"render all {len(stacks)} example stacks", total, "s", target=3.0))
    return figures
