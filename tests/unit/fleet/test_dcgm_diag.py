"""The DCGM diagnostic level a stack's verify run requires: by stage unless the stack says, carried to verify.yml by
the plan's host view, and only one of DCGM's run levels (gpufleet/catalog/dcgm_diag.yaml)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gpufleet.catalog.dcgm import diag_levels
from gpufleet.plan.hosts import plan_file, stack_view
from gpufleet.spec.models import VerifySettings
from tests.conftest import FIXTURES, REPO

NVL72 = FIXTURES / "owners" / "Pulumi.prod-nvl72.yaml"  # stage prod


def view_of(text: str, tmp_path: Path, name: str) -> dict:
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(text)
    return stack_view(plan_file(path))


def test_the_level_follows_the_stage_quick_in_the_lab_long_in_prod():
    assert stack_view(plan_file(REPO / "Pulumi.lab-local.yaml"))["verify"] == {"dcgm_diag_level": 1, "canaries": []}
    assert stack_view(plan_file(NVL72))["verify"]["dcgm_diag_level"] == 3


@pytest.mark.parametrize(("stage", "level"), [("staging", 2), ("qa", 1)])
def test_staging_runs_the_medium_diagnostic_and_other_stages_the_quick_one(tmp_path: Path, stage: str, level: int):
    text = NVL72.read_text().replace("gpufleet:stage: prod", f"gpufleet:stage: {stage}")
    assert f"gpufleet:stage: {stage}" in text
    assert view_of(text, tmp_path, f"{stage}-nvl72")["verify"]["dcgm_diag_level"] == level


def test_a_stack_that_sets_its_level_and_canaries_gets_them(tmp_path: Path):
    text = NVL72.read_text().replace(
        "  gpufleet:baremetal:\n",
        "  gpufleet:baremetal:\n    verify: {dcgm_diag_level: 4, canaries: [gpu-1]}\n",
    )
    assert view_of(text, tmp_path, "prod-nvl72")["verify"] == {"dcgm_diag_level": 4, "canaries": ["gpu-1"]}


def accepted(level: int) -> bool:
    try:
        VerifySettings(dcgm_diag_level=level)
    except ValidationError:
        return False
    return True


def test_every_level_a_stack_may_set_is_one_of_dcgms_run_levels():
    allowed = [level for level in range(-1, 7) if accepted(level)]
    assert allowed == sorted(diag_levels()) == [1, 2, 3, 4]
    assert [diag_levels()[n].name for n in allowed] == ["quick", "medium", "long", "xlong"]
