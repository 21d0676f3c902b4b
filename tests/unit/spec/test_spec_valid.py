"""The example stacks are valid, and validation depends on what it should (the date, the catalog)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gpufleet.spec.files import find_project_root, resolve_stack, stack_files
from gpufleet.spec.load import dump_stack, load_stack, load_stack_text
from tests.conftest import EXAMPLE_STACKS, REPO, TODAY


def test_the_five_example_stacks_exist():
    assert {p.name for p in EXAMPLE_STACKS} == {
        "Pulumi.dev-westeurope.yaml",
        "Pulumi.staging-westeurope.yaml",
        "Pulumi.prod-westeurope.yaml",
        "Pulumi.prod-eastus.yaml",
        "Pulumi.lab-local.yaml",
    }


@pytest.mark.parametrize("path", EXAMPLE_STACKS, ids=lambda p: p.stem)
def test_example_stack_is_valid_and_round_trips(path: Path):
    result = load_stack(path, today=TODAY)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    again = load_stack_text(dump_stack(result.stack), path.name, today=TODAY)
    assert again.ok, again.diagnostics
    assert again.stack == result.stack


def test_examples_cover_the_pool_kinds_the_issue_names():
    pools = [p for path in EXAMPLE_STACKS if (s := load_stack(path).stack).aks for p in s.aks.gpu_pools]
    sizes = {p.name: p.vm_size for p in pools}
    assert any(p.mig and p.mig.managed_by == "operator" and "H100" in p.vm_size for p in pools)
    assert any(p.mig and p.mig.managed_by == "aks" and "A100" in p.vm_size for p in pools)
    assert any(p.sharing.mode == "time-slicing" for p in pools)
    assert any(p.spot for p in pools)
    assert any(p.autoscaling for p in pools)
    assert sizes  # every pool has a size


def test_stack_validity_follows_the_date():
    def errors(text: str, day: dt.date) -> list[str]:
        return [d.path for d in load_stack_text(text, "x.yaml", today=day).diagnostics]

    retired = (REPO / "tests/fixtures/invalid/vm_size_retired.yaml").read_text()
    assert "aks.gpu_pools[0].vm_size" not in errors(retired, dt.date(2025, 9, 29))
    assert "aks.gpu_pools[0].vm_size" in errors(retired, dt.date(2025, 9, 30))
    # the release: driver branch 595 is supported until the end of March 2027, and AKS offers 1.36 from June 2026
    dev = (REPO / "Pulumi.dev-westeurope.yaml").read_text()
    assert errors(dev, dt.date(2026, 6, 1)) == errors(dev, dt.date(2027, 3, 31)) == []
    assert errors(dev, dt.date(2026, 5, 31)) == ["release.kubernetes"]
    assert errors(dev, dt.date(2027, 4, 1)) == ["release.driver_branch"]


def test_operator_pools_disable_the_aks_driver_and_aks_pools_keep_it():
    stack = load_stack(REPO / "Pulumi.prod-westeurope.yaml").stack
    assert {p.driver: p.aks_gpu_driver for p in stack.aks.gpu_pools} == {"operator": "None"}
    dev = load_stack(REPO / "Pulumi.dev-westeurope.yaml").stack
    assert {p.aks_gpu_driver for p in dev.aks.gpu_pools} == {"Install"}


def test_upgrade_defaults_respect_spot():
    dev = load_stack(REPO / "Pulumi.dev-westeurope.yaml").stack
    by_name = {p.name: p for p in dev.aks.gpu_pools}
    assert by_name["t4shared"].effective_upgrade.max_surge == "33%"
    assert by_name["t4spot"].effective_upgrade.max_surge is None


def test_stack_resolution_by_name_and_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assert find_project_root(REPO / "gpufleet" / "spec") == REPO
    assert resolve_stack("prod-eastus", REPO).name == "Pulumi.prod-eastus.yaml"
    assert len(stack_files(REPO)) == 5
    with pytest.raises(LookupError, match="did you mean 'prod-eastus'"):
        resolve_stack("prod-eastsu", REPO)
    monkeypatch.chdir(tmp_path)
    assert find_project_root() == tmp_path.resolve()


def test_validation_reports_unreadable_and_non_mapping_files(tmp_path: Path):
    missing = load_stack(tmp_path / "Pulumi.dev-x.yaml")
    assert missing.diagnostics[0].message.startswith("cannot read")
    scalar = tmp_path / "Pulumi.dev-y.yaml"
    scalar.write_text("just text\n")
    assert "YAML mapping" in load_stack(scalar).diagnostics[0].message
