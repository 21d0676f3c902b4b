"""The Pulumi program for a DRA cluster (examples/dra/Pulumi.dev-eastus2.yaml, every GPU pool advertiser dra) under
mocks: the GPU Operator release it installs runs a GPUCluster with the DRA driver, not a ClusterPolicy, and what it
registers passes the same checks as every example stack (tests/infra/checks.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.kube.labels import DRA_OPERAND_LABELS
from gpufleet.spec.load import load_stack
from tests.charts import needs_charts
from tests.conftest import REPO
from tests.infra import checks
from tests.infra.harness import Run, run_program

EXAMPLES = REPO / "examples" / "dra"
STACK = "dev-eastus2"


@pytest.fixture(scope="module")
def run() -> Run:
    return run_program(STACK, EXAMPLES)


def test_a_dra_pool_installs_the_operator_with_a_gpu_cluster(run):
    release = checks.the(run.recorder.resources, checks.RELEASE)
    assert (release.inputs["chart"], release.inputs["version"]) == ("gpu-operator", "v26.7.0")
    values = release.inputs["values"]
    assert values["clusterPolicy"] == {"deployCR": False} and values["gpuCluster"] == {"deployCR": True}
    assert values["draDriver"]["computeDomains"] == {"enabled": True}  # the GB200 pool's NVLink spans nodes
    assert values["devicePlugin"] == {"enabled": False}
    # AKS installs driver and toolkit on every pool: the operator installs neither
    assert values["driver"] == {"enabled": False} and values["toolkit"] == {"enabled": False}


def test_the_dra_cluster_passes_every_check_the_example_stacks_pass(run):
    stack = load_stack(EXAMPLES / f"Pulumi.{STACK}.yaml").stack
    resources = run.recorder.resources
    assert checks.enum_problems(resources) == []
    assert checks.pool_name_problems(resources) == []
    assert checks.count_problems(resources) == []
    assert checks.spot_problems(resources) == []
    assert checks.taint_label_problems(resources, stack) == []
    assert checks.driver_problems(resources) == []
    assert checks.kubernetes_object_problems(resources) == []
    assert checks.release_problems(resources, stack) == []


@needs_charts
def test_the_dra_clusters_helm_values_use_only_the_charts_keys(run):
    assert checks.helm_key_problems(run.recorder.resources) == []


def test_the_aks_mig_pool_keeps_its_gpu_instance_profile_and_no_device_plugin_label(run):
    pools = {p.inputs["tags"]["gpufleet-pool"]: p for p in checks.of_type(run.recorder.resources, checks.AGENT_POOL)}
    assert pools["h100mig"].inputs["gpuInstanceProfile"] == "MIG3g"
    for pool in pools.values():
        labels = pool.inputs.get("nodeLabels") or {}
        assert not [k for k in labels if k.startswith("nvidia.com/")], labels  # nothing for a device plugin


def test_a_none_pool_of_a_dra_cluster_carries_the_dra_operands_off_switches(tmp_path: Path):
    text = (EXAMPLES / f"Pulumi.{STACK}.yaml").read_text()
    idle = "".join(
        f"{indent}{line}\n"
        for indent, line in (
            ("      - ", "name: h100idle"),
            ("        ", "vm_size: Standard_NC40ads_H100_v5"),
            ("        ", "count: 1"),
            ("        ", "advertiser: none"),
        )
    )
    (tmp_path / f"Pulumi.{STACK}.yaml").write_text(text + idle)
    run = run_program(STACK, tmp_path)
    pools = {p.inputs["tags"]["gpufleet-pool"]: p for p in checks.of_type(run.recorder.resources, checks.AGENT_POOL)}
    labels = pools["h100idle"].inputs["nodeLabels"]
    assert {k: labels.get(k) for k in DRA_OPERAND_LABELS} == dict.fromkeys(DRA_OPERAND_LABELS, "false")
    assert not set(DRA_OPERAND_LABELS) & set(pools["h100"].inputs.get("nodeLabels") or {})
    release = checks.the(run.recorder.resources, checks.RELEASE)
    assert release.inputs["values"]["gpuCluster"] == {"deployCR": True}
