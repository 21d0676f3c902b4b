"""The system pool and AKS's per-cluster limits: what AKS would refuse is a validation error at ``file:line``, never a
crash of a later command (tests/fixtures/invalid/system_pool_*.yaml and cluster_too_many_nodes.yaml show each error
in place)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.catalog import load_catalog
from gpufleet.spec.load import load_stack_text
from gpufleet.spec.models import SystemPool
from gpufleet.spec.rules import AKS_MAX_NODE_POOLS, SYSTEM_POOL_MIN_MEMORY_GIB, SYSTEM_POOL_MIN_VCPUS
from tests.conftest import REPO, TODAY, cli

DEV = (REPO / "Pulumi.dev-westeurope.yaml").read_text()


def _project(tmp_path: Path, text: str) -> Path:
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.dev-westeurope.yaml").write_text(text)
    return tmp_path


def test_a_system_pool_name_that_crashed_plan_is_a_validation_error_and_plan_exits_1(tmp_path: Path):
    """A system pool named with rich markup passed validation and made ``gpufleet plan`` fail with an internal
    error (exit 3); the name is now checked like a GPU pool's, and plan refuses the stack with exit 1."""
    assert "        vm_size: Standard_D4ds_v5\n" in DEV
    text = DEV.replace(
        "        vm_size: Standard_D4ds_v5\n", '        name: "sys[/x]"\n        vm_size: Standard_D4ds_v5\n'
    )
    root = _project(tmp_path, text)
    line = text.splitlines().index('        name: "sys[/x]"') + 1

    validate = cli("validate", "dev-westeurope", "--root", str(root), cwd=root)
    assert validate.returncode == 1, validate.stdout + validate.stderr
    assert (
        f"Pulumi.dev-westeurope.yaml:{line}: aks.cluster.system_pool.name: 'sys[/x]' is not an AKS" in validate.stdout
    )

    plan = cli("plan", "dev-westeurope", "--root", str(root), cwd=root)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "internal error" not in plan.stderr
    assert f":{line}: aks.cluster.system_pool.name:" in plan.stderr


def test_a_gpu_size_for_the_system_pool_is_refused_and_plan_exits_1(tmp_path: Path):
    text = DEV.replace("vm_size: Standard_D4ds_v5", "vm_size: Standard_NC4as_T4_v3")
    root = _project(tmp_path, text)
    plan = cli("plan", "dev-westeurope", "--root", str(root), cwd=root)
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "aks.cluster.system_pool.vm_size: 'Standard_NC4as_T4_v3' is a GPU size (T4)" in plan.stderr


def _pools(n: int) -> str:
    return "".join(f"      - {{name: p{i}, vm_size: Standard_NC4as_T4_v3, count: 1}}\n" for i in range(n))


def _stack_with_pools(n: int) -> str:
    head, _, _ = DEV.partition("    gpu_pools:\n")
    return head + "    gpu_pools:\n" + _pools(n)


def test_at_most_100_node_pools_per_cluster_the_system_pool_included():
    line = _stack_with_pools(1).splitlines().index("    gpu_pools:") + 1
    at_limit = load_stack_text(_stack_with_pools(AKS_MAX_NODE_POOLS - 1), "Pulumi.dev-westeurope.yaml", today=TODAY)
    assert at_limit.ok, at_limit.diagnostics
    over = load_stack_text(_stack_with_pools(AKS_MAX_NODE_POOLS), "Pulumi.dev-westeurope.yaml", today=TODAY)
    assert [str(d) for d in over.diagnostics] == [
        f"Pulumi.dev-westeurope.yaml:{line}: aks.gpu_pools: 100 GPU pools and the system pool are 101 node pools;"
        " AKS allows at most 100 per cluster"
    ]


def test_node_counts_stay_within_aks_limits():
    def errors(pool: str) -> list[str]:
        head, _, _ = DEV.partition("    gpu_pools:\n")
        loaded = load_stack_text(head + "    gpu_pools:\n" + pool, "Pulumi.dev-westeurope.yaml", today=TODAY)
        return [f"{d.path}: {d.message}" for d in loaded.diagnostics]

    ok = (
        "      - {name: a, vm_size: Standard_NC4as_T4_v3, count: 1000, autoscaling: {min: 0, max: 1000},"
        " scale_to_zero: true}\n"
    )
    assert errors(ok) == []
    assert errors(ok.replace("count: 1000", "count: 1001"))[0].startswith("aks.gpu_pools[0].count: ")
    assert errors(ok.replace("max: 1000", "max: 1001"))[0].startswith("aks.gpu_pools[0].autoscaling.max: ")
    assert errors(ok.replace("count: 1000", "count: -1"))[0].startswith("aks.gpu_pools[0].count: ")
    assert errors(ok.replace("min: 0, max: 1000", "min: 5, max: 4").replace("count: 1000", "count: 4")) == [
        "aks.gpu_pools[0].autoscaling.min: min 5 is above max 4"
    ]


def test_the_system_pool_needs_a_node():
    loaded = load_stack_text(
        DEV.replace("        count: 1\n        zones", "        count: 0\n        zones"), "Pulumi.dev-westeurope.yaml"
    )
    assert [d.path for d in loaded.diagnostics] == ["aks.cluster.system_pool.count"]


def test_the_default_system_pool_size_is_a_catalog_size_aks_accepts():
    size = load_catalog().system_vm_size(SystemPool().vm_size)
    assert size is not None and not size.burstable
    assert size.vcpus >= SYSTEM_POOL_MIN_VCPUS and size.memory_gib >= SYSTEM_POOL_MIN_MEMORY_GIB
