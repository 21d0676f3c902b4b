"""The rule that holds every stack's gpufleet:release to the release table (gpufleet/catalog/releases.yaml): each
stack pins a combination of the table, a changed pin is refused at its key naming what is supported, and the dates
(upstream's, AKS's, NVIDIA's) decide what is supported."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.catalog.releases import load_releases
from gpufleet.spec.load import load_stack
from gpufleet.spec.models import Release
from gpufleet.spec.rules import Context, check_release, kubernetes_choices
from tests.conftest import EXAMPLE_STACKS, FIXTURES, REPO, TODAY
from tests.stacks import release_pins

TABLE = load_releases()
STACKS = [
    *EXAMPLE_STACKS,
    REPO / "examples/baremetal/Pulumi.prod-onprem.yaml",
    FIXTURES / "gpu-software/Pulumi.prod-onprem.yaml",
]
COMPONENTS = ("device_plugin", "mig_parted", "container_toolkit", "dra_driver", "nfd")
CURRENT = release_pins()


def findings(today: dt.date = TODAY, *, aks: bool = False, baremetal: bool = True, **pins: str) -> list[tuple]:
    """``(key path, message)`` of each release finding for the current pins changed by ``pins``."""
    ctx = Context(catalog=load_catalog(), today=today)
    release = Release.model_validate({**CURRENT, **pins})
    return [(".".join(map(str, f.path)), f.message) for f in check_release(release, ctx, aks=aks, baremetal=baremetal)]


@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_stack_pins_a_combination_of_the_table(path: Path):
    loaded = load_stack(path, today=TODAY)
    assert loaded.ok, loaded.diagnostics
    release = loaded.stack.release
    op = TABLE.find_gpu_operator(release.gpu_operator)
    assert op is not None
    assert {k: getattr(release, k) for k in COMPONENTS} == {k: getattr(op.components, k) for k in COMPONENTS}
    assert release.driver_branch in TABLE.supported_branches(op, TODAY)
    ctx = Context(catalog=load_catalog(), today=TODAY)
    has_aks, has_bm = loaded.stack.aks is not None, loaded.stack.baremetal is not None
    assert release.kubernetes in kubernetes_choices(op, ctx, aks=has_aks, baremetal=has_bm)


@pytest.mark.parametrize(
    ("pins", "path", "message"),
    [
        (
            {"driver_branch": "570"},
            "release.driver_branch",
            "GPU Operator v26.7.0 supports driver branches 580, 595; '570' is not one of them",
        ),
        (
            {"driver_branch": "610"},  # in the operator's matrix, but a new feature branch that ended in August 2026
            "release.driver_branch",
            "driver branch 610 reached its end of life on 2026-08-31 (new feature branch); GPU Operator v26.7.0"
            " supports driver branches 580, 595",
        ),
        (
            {"gpu_operator": "v26.3.3"},
            "release.gpu_operator",
            "GPU Operator 'v26.3.3' is not in gpufleet's release table (gpufleet/catalog/releases.yaml);"
            " known: v26.7.0",
        ),
        (
            {"container_toolkit": "v1.19.0"},
            "release.container_toolkit",
            "GPU Operator v26.7.0 ships container toolkit v1.20.0; 'v1.19.0' does not go with it",
        ),
        ({"dra_driver": "v0.4.1"}, "release.dra_driver", "ships DRA driver v0.5.0; 'v0.4.1' does not go with it"),
        ({"nfd": "v0.18.0"}, "release.nfd", "ships Node Feature Discovery v0.19.0; 'v0.18.0' does not go"),
        ({"mig_parted": "v0.14.0"}, "release.mig_parted", "ships MIG manager (mig-parted) v0.15.0; 'v0.14.0'"),
        (
            {"kubernetes": "1.37"},
            "release.kubernetes",
            "GPU Operator v26.7.0 supports Kubernetes 1.33-1.36; '1.37' is outside it; supported with GPU Operator"
            " v26.7.0: 1.35, 1.36",
        ),
        (
            {"kubernetes": "1.40"},
            "release.kubernetes",
            "Kubernetes 1.40 is not in gpufleet's release table (gpufleet/catalog/releases.yaml); supported with GPU"
            " Operator v26.7.0: 1.35, 1.36",
        ),
    ],
)
def test_a_changed_pin_is_refused_naming_what_is_supported(pins: dict[str, str], path: str, message: str):
    ((got_path, got),) = findings(**pins)
    assert got_path == path and message in got


def test_the_current_pins_pass_on_aks_and_on_bare_metal():
    assert findings(aks=True, baremetal=False) == findings(aks=False, baremetal=True) == []
    assert findings(aks=True, baremetal=True) == []


def test_an_unknown_operator_still_has_its_kubernetes_checked():
    found = findings(gpu_operator="v27.1.0", kubernetes="1.34")
    assert [p for p, _ in found] == ["release.gpu_operator", "release.kubernetes"]
    assert "Kubernetes 1.34 reached its end of life on 2026-10-27" in found[1][1]
    assert found[1][1].endswith("supported with this stack: 1.35, 1.36, 1.37")  # no operator range to narrow it


def test_kubernetes_1_34_ended_upstream_before_it_ends_on_aks():
    """Upstream's 1.34 patches ended on 2026-10-27; AKS supports 1.34 until the end of November 2026."""
    assert findings(kubernetes="1.34", aks=True, baremetal=False) == []
    ((_, bare),) = findings(kubernetes="1.34", aks=False, baremetal=True)
    assert bare.startswith("Kubernetes 1.34 reached its end of life on 2026-10-27 (kubernetes.io/releases/1.34/)")
    ((_, both),) = findings(kubernetes="1.34", aks=True, baremetal=True)  # a stack with both runs both clusters
    assert both == bare
    ((_, late),) = findings(dt.date(2026, 12, 1), kubernetes="1.34", aks=True, baremetal=False)
    assert late == "AKS supported Kubernetes 1.34 until 2026-11-30; supported with GPU Operator v26.7.0: 1.35, 1.36"


def test_aks_offers_a_minor_only_from_its_ga():
    """1.36 was released upstream on 2026-04-22; AKS made it GA in June 2026."""
    day = dt.date(2026, 5, 15)
    assert findings(day, aks=False, baremetal=True) == []
    ((path, message),) = findings(day, aks=True, baremetal=False)
    assert path == "release.kubernetes"
    assert message == (
        "AKS offers Kubernetes 1.36 from June 2026 (GA), not yet; supported with GPU Operator v26.7.0: 1.34, 1.35"
    )


def test_a_patch_older_than_the_dra_driver_needs_is_refused():
    ((path, message),) = findings(kubernetes="1.34.1", aks=True, baremetal=False)
    assert path == "release.kubernetes"
    assert message.startswith("the DRA driver v0.5.0 needs Kubernetes 1.34.2 or later; '1.34.1' is older")
    assert findings(kubernetes="1.34.2", aks=True, baremetal=False) == []
    assert findings(kubernetes="1.36.4", aks=True, baremetal=False) == []


def test_the_kubernetes_floor_is_1_34():
    ((_, message),) = findings(dt.date(2026, 6, 1), kubernetes="1.33")
    assert message.startswith("gpufleet needs Kubernetes 1.34 or later (Dynamic Resource Allocation")


def test_a_branch_older_than_the_dra_driver_needs_is_refused_while_nvidia_still_supports_it():
    ((path, message),) = findings(dt.date(2026, 6, 1), driver_branch="535")
    assert path == "release.driver_branch"
    assert message == (
        "the DRA driver v0.5.0 needs driver branch 565 or later; GPU Operator v26.7.0 supports driver branches 580,"
        " 595, 610"
    )
