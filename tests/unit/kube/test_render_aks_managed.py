"""gpufleet render on examples/aks: no chart's GPU software runs on pools whose GPU stack AKS manages
(gpu_management: managed), and it reaches the other pools, NAP's included."""

from __future__ import annotations

import dataclasses

from gpufleet.catalog import load_catalog
from gpufleet.kube import charts
from gpufleet.kube.labels import GPU_PRESENT_LABEL
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack
from tests.charts import CHARTS_DIR, needs_charts
from tests.conftest import REPO, TODAY

pytestmark = needs_charts

STACK = REPO / "examples" / "aks" / "Pulumi.preview-westeurope.yaml"
MANAGED = {"t4managed", "a100mgd"}


def _plan():
    loaded = load_stack(STACK, today=TODAY)
    assert loaded.stack is not None
    return plan_stack(loaded.stack, load_catalog())


def test_the_device_plugin_serves_every_pool_but_those_aks_manages():
    result = charts.render(_plan(), directory=CHARTS_DIR)
    assert result.problems == []
    (plugin,) = [c for c in result.coverage if c.name == "nvidia-device-plugin"]
    assert set(plugin.runs_on) == {"a100al3", "t4nap"}
    assert {m.target for m in plugin.misses if m.intended} == MANAGED


def test_a_gpu_daemonset_landing_on_a_managed_pool_is_a_problem():
    """Were a managed pool labelled for gpufleet's device plugin, two device plugins would own its GPUs."""
    plan = _plan()
    pools = tuple(
        dataclasses.replace(p, labels={**p.labels, GPU_PRESENT_LABEL: "true"}) if p.name == "t4managed" else p
        for p in plan.pools
    )
    result = charts.render(dataclasses.replace(plan, pools=pools), directory=CHARTS_DIR)
    assert any("would run on t4managed, which it is not for: AKS runs its driver" in p for p in result.problems)
