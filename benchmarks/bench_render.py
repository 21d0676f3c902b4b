"""`gpufleet render` of every example stack: helm template of the pinned charts, the objects read back and the
scheduling check (target: all example stacks under 3 s together). Charts from where the tests take them
(tests/charts.py: $GPUFLEET_CHARTS_DIR, else ../shared/reference/charts, else the helm pull cache)."""

from __future__ import annotations

import time

from benchmarks.common import REPO, Figure


def run() -> list[Figure]:
    from gpufleet.catalog import load_catalog
    from gpufleet.kube import charts
    from gpufleet.plan.build import plan_stack
    from gpufleet.spec.load import load_stack
    from tests.charts import CHARTS_DIR

    if CHARTS_DIR is None:
        raise RuntimeError(f"no pinned charts: set {charts.CHARTS_DIR_ENV} (see docs/render.md)")
    catalog = load_catalog()
    stacks = [load_stack(p).stack for p in sorted(REPO.glob("Pulumi.*-*.yaml"))]
    figures, total = [], 0.0
    for stack in stacks:
        assert stack is not None, "an example stack is invalid: run gpufleet validate"
        start = time.perf_counter()
        result = charts.render(plan_stack(stack, catalog), directory=CHARTS_DIR)
        elapsed = time.perf_counter() - start
        total += elapsed
        assert not result.problems, result.problems
        figures.append(Figure(f"render {stack.name}", elapsed, "s"))
    figures.append(Figure(f"render all {len(stacks)} example stacks", total, "s", target=3.0))
    return figures
