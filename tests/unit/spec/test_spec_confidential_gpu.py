"""AKS's confidential GPU pools (learn.microsoft.com/azure/aks/use-confidential-gpus; azure_vm_sizes.yaml [aks-cgpu]):
a Standard_NCC40ads_H100_v5 pool set up as AKS documents it (AKS's driver install skipped, the GPU Operator's signed
driver: ``driver: operator``) validates; with MIG, with AKS's own driver, on Azure Linux or as a NAP pool it is refused
at the key that asks for it."""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet.catalog import load_catalog
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack
from tests.conftest import REPO, TODAY, cli

DEV = (REPO / "Pulumi.dev-westeurope.yaml").read_text()
ANCHOR = "  # Who queues GPU work"
NCC = "      - name: h100conf\n        vm_size: Standard_NCC40ads_H100_v5\n        count: 1\n"
DOC = "learn.microsoft.com/azure/aks/use-confidential-gpus"


def _stack(tmp_path: Path, *pool_lines: str) -> tuple[Path, list[str]]:
    """dev-westeurope with one more GPU pool, the confidential one (its lines after ``NCC``), in ``tmp_path``."""
    assert ANCHOR in DEV
    text = DEV.replace(ANCHOR, NCC + "".join(f"        {line}\n" for line in pool_lines) + ANCHOR)
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    path = tmp_path / "Pulumi.dev-westeurope.yaml"
    path.write_text(text)
    return path, text.splitlines()


def _line(lines: list[str], text: str) -> int:
    """The line of ``text`` in the confidential pool (from its first line on: other pools may hold the same text)."""
    return lines.index(text, lines.index("      - name: h100conf")) + 1


def _findings(path: Path) -> list[tuple[int, str, str]]:
    result = load_stack(path, today=TODAY)
    assert not result.ok
    return [(d.line, d.path, d.message) for d in result.diagnostics]


def test_a_pool_set_up_as_aks_documents_validates_and_plans_with_the_operators_driver(tmp_path: Path):
    path, _ = _stack(tmp_path, "driver: operator")
    result = load_stack(path, today=TODAY)
    assert result.ok, [str(d) for d in result.diagnostics]
    plan = plan_stack(result.stack, load_catalog())
    pools = {p.name: p for p in plan.pools}
    assert pools["h100conf"].aks_gpu_driver == "None"  # AKS's `--gpu-driver none`
    assert "nvidia.com/gpu.deploy.driver" not in pools["h100conf"].labels  # the operator's driver runs there
    assert all(pools[n].labels["nvidia.com/gpu.deploy.driver"] == "false" for n in ("t4shared", "a100mig", "t4spot"))
    assert plan.cluster.gpu_chart == "gpu-operator"
    values = plan.cluster.gpu_software.values
    assert values["driver"] == {"enabled": True} and values["toolkit"] == {"enabled": True}


def test_validate_cli_accepts_the_documented_pool_and_refuses_aks_driver_install_at_its_line(tmp_path: Path):
    good, _ = _stack(tmp_path, "driver: operator", "os_sku: Ubuntu2204")
    ok = cli("validate", "--json", str(good), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout) == [{"stack": "dev-westeurope", "ok": True, "errors": []}]

    bad, lines = _stack(tmp_path, "driver: aks")
    refused = cli("validate", str(bad), cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    where = f"Pulumi.dev-westeurope.yaml:{_line(lines, '        driver: aks')}: aks.gpu_pools[3].driver: "
    assert where + "Standard_NCC40ads_H100_v5 is a confidential GPU size" in refused.stdout
    said = "driver: aks would have AKS install its own (gpuProfile.driver Install): set driver: operator"
    assert said in " ".join(refused.stdout.split())


def test_the_default_driver_is_refused_at_the_pool_saying_what_to_write(tmp_path: Path):
    path, lines = _stack(tmp_path)
    [(line, key, message)] = _findings(path)
    assert (line, key) == (_line(lines, "      - name: h100conf"), "aks.gpu_pools[3].driver")
    assert DOC in message and "driver is aks by default" in message
    assert message.endswith("set driver: operator (gpuProfile.driver None, the GPU Operator owns the driver)")


def test_aks_mig_and_an_operator_mig_layout_are_refused_as_confidential_gpus_run_whole(tmp_path: Path):
    aks_mig, lines = _stack(tmp_path, "driver: operator", "mig: {managed_by: aks, profile: MIG1g}")
    [(line, key, message)] = _findings(aks_mig)
    assert (line, key) == (_line(lines, "        mig: {managed_by: aks, profile: MIG1g}"), "aks.gpu_pools[3].mig")
    assert "confidential GPU size" in message and "whole GPU, with no MIG" in message and DOC in message
    assert "remove mig; MIG on H100-NVL-94GB: Standard_NC40ads_H100_v5, Standard_NC80adis_H100_v5" in message

    layout = ("mig:", "  managed_by: operator", "  config_name: conf", "  devices: [{profiles: {1g.12gb: 7}}]")
    operator_mig, lines = _stack(tmp_path, "driver: operator", *layout)
    [(line, key, message)] = _findings(operator_mig)
    assert (line, key) == (_line(lines, "        mig:"), "aks.gpu_pools[3].mig")
    assert "neither AKS nor the GPU Operator may partition it" in message


def test_azure_linux_nap_and_the_managed_stack_are_refused(tmp_path: Path):
    azl, lines = _stack(tmp_path, "driver: operator", "os_sku: AzureLinux")
    [(line, key, message)] = _findings(azl)
    assert (line, key) == (_line(lines, "        os_sku: AzureLinux"), "aks.gpu_pools[3].os_sku")
    assert "supports Ubuntu 22.04, Ubuntu 24.04" in message

    # with NAP on, AKS creates no autoscaling node pools: dev's pools get fixed counts for this case
    nap = NCC.replace("h100conf", "h100nap").replace("count: 1", "kind: nap\n        max_nodes: 2")
    text = DEV.replace(ANCHOR, nap + "        driver: operator\n" + ANCHOR)
    for line in ("        autoscaling: {min: 1, max: 4}\n", "        autoscaling: {min: 0, max: 3}\n"):
        text = text.replace(line, "")
    path = tmp_path / "Pulumi.dev-westeurope.yaml"
    path.write_text(text.replace("        scale_to_zero: true\n", ""))
    [(_, key, message)] = _findings(path)
    assert key == "aks.gpu_pools[3].kind" and "do not work with node auto-provisioning" in message

    managed, _ = _stack(tmp_path, "gpu_management: managed")
    keys = {key for _, key, _ in _findings(managed)}
    assert "aks.gpu_pools[3].gpu_management" in keys and "aks.gpu_pools[3].driver" not in keys
