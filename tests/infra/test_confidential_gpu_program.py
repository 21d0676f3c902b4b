"""The Pulumi program for a stack with a confidential GPU pool (Standard_NCC40ads_H100_v5, ``driver: operator``), under
mocks: the AgentPool it sends skips AKS's driver install (``gpuProfile.driver: None``, AKS's ``--gpu-driver none``),
and the cluster's GPU Operator owns that pool's driver and toolkit while the other pools keep AKS's."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.kube.labels import DEPLOY_DRIVER_LABEL
from gpufleet.spec.load import load_stack
from tests.conftest import REPO
from tests.infra import checks
from tests.infra.harness import Run, run_program

STACK = "dev-westeurope"
ANCHOR = "  # Who queues GPU work"
NCC_POOL = "".join(
    f"{line}\n"
    for line in (
        "      - name: h100conf",
        "        vm_size: Standard_NCC40ads_H100_v5",
        "        count: 1",
        "        driver: operator",
    )
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    text = (REPO / f"Pulumi.{STACK}.yaml").read_text()
    assert ANCHOR in text
    root = tmp_path_factory.mktemp("confidential")
    (root / f"Pulumi.{STACK}.yaml").write_text(text.replace(ANCHOR, NCC_POOL + ANCHOR))
    return root


@pytest.fixture(scope="module")
def run(root: Path) -> Run:
    return run_program(STACK, root)


def _pools(run: Run) -> dict[str, dict]:
    return {p.inputs["tags"]["gpufleet-pool"]: p.inputs for p in checks.agent_pools(run.recorder.resources)}


def test_the_confidential_pool_is_sent_with_the_aks_driver_install_skipped(run: Run):
    pools = _pools(run)
    conf = pools["h100conf"]
    assert conf["vmSize"] == "Standard_NCC40ads_H100_v5"
    assert conf["gpuProfile"] == {"driver": "None"}
    assert conf["osSKU"] == "Ubuntu" and "gpuInstanceProfile" not in conf
    assert DEPLOY_DRIVER_LABEL not in conf["nodeLabels"]
    # the other pools keep AKS's driver, and the operator's driver daemonset stays off them
    for name in ("t4shared", "a100mig", "t4spot"):
        assert pools[name]["gpuProfile"] == {"driver": "Install"}, name
        assert pools[name]["nodeLabels"][DEPLOY_DRIVER_LABEL] == "false", name


def test_the_gpu_operator_installs_the_driver_and_toolkit_for_it(run: Run):
    release = checks.the(run.recorder.resources, checks.RELEASE)
    assert release.inputs["chart"] == "gpu-operator"
    assert release.inputs["values"]["driver"]["enabled"] is True
    assert release.inputs["values"]["toolkit"]["enabled"] is True
    assert checks.driver_problems(run.recorder.resources) == []


def test_the_resources_pass_the_checks_azure_and_aks_would_make(run: Run, root: Path):
    stack = load_stack(root / f"Pulumi.{STACK}.yaml").stack
    assert stack is not None
    resources = run.recorder.resources
    assert checks.enum_problems(resources) == []
    assert checks.pool_name_problems(resources) == []
    assert checks.taint_label_problems(resources, stack) == []
    assert checks.release_problems(resources, stack) == []
