"""One owner per concern on a live host (gpufleet.host.owners; the stack side is gpufleet.spec.owners): what the reader
finds below a host root where each owner left its traces (TEST DOUBLES: files planted in tmp_path where the driver's
module, the GPU Operator's driver container, the device plugin and the DRA kubelet plugin leave theirs), the one
judgement of it against a plan, the plan's host view that names the expected owners, and the nvidia-imex judgement
of gpufleet.host.driver for ComputeDomain hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.host.driver import DriverState, Platform, driver_problems, plan_driver
from gpufleet.host.owners import NVIDIA_MODULES, owner_conflicts, read_owners
from gpufleet.plan.hosts import host_view, plan_file
from tests.conftest import REPO

KERNEL = "6.8.0-51-generic"
NVL72 = REPO / "tests/fixtures/owners/Pulumi.prod-nvl72.yaml"
DEVICE_PLUGIN_SOCKET = "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"
DRA_SOCKET = "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock"


def plant(root: Path, files: dict[str, str]) -> str:
    for path, content in files.items():
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text(content)
    return str(root)


def owners(root: Path, files: dict[str, str]) -> dict[str, list[str]]:
    seen = read_owners(plant(root, files), KERNEL)
    return {concern: [e["owner"] for e in entries] for concern, entries in seen.items()}


def test_a_host_without_traces_shows_no_owner(tmp_path: Path):
    assert read_owners(str(tmp_path), KERNEL) == {"driver": [], "advertiser": []}


@pytest.mark.parametrize(
    "modules_dep",
    ["updates/dkms/nvidia.ko.zst:\n", "kernel/nvidia-580-open/nvidia.ko: \n", "updates/dkms/nvidia-current-open.ko:\n"],
)
def test_the_hosts_driver_module_in_modules_dep_is_the_host_owner(tmp_path: Path, modules_dep: str):
    """DKMS (compressed or not), Ubuntu's precompiled package, Debian's renamed module."""
    seen = read_owners(plant(tmp_path, {f"lib/modules/{KERNEL}/modules.dep": modules_dep}), KERNEL)
    (entry,) = seen["driver"]
    assert entry["owner"] == "host"
    assert entry["evidence"] == f"/lib/modules/{KERNEL}/" + modules_dep.split(":")[0]


def test_nvidia_uvm_or_another_kernels_module_is_not_the_driver(tmp_path: Path):
    files = {
        f"lib/modules/{KERNEL}/modules.dep": "updates/dkms/nvidia-uvm.ko:\nkernel/fs/fuse/fuse.ko:\n",
        "lib/modules/6.8.0-40-generic/modules.dep": "updates/dkms/nvidia.ko:\n",
    }
    assert owners(tmp_path, files)["driver"] == []


def test_every_module_name_a_driver_plan_names_counts_as_the_hosts_driver():
    debian = Platform("Debian", "Debian", "12", "bookworm", KERNEL)
    names = {
        plan_driver(debian, branch="580").kernel_module,
        plan_driver(debian, branch="535", source="debian").kernel_module,
        plan_driver(debian, branch="535", source="debian", kernel_modules="proprietary").kernel_module,
    }
    assert names == set(NVIDIA_MODULES)


def test_the_operators_driver_container_shows_by_its_mount_or_its_lock_file(tmp_path: Path):
    mounted = {"proc/mounts": "tmpfs /run tmpfs rw 0 0\noverlay /run/nvidia/driver overlay rw 0 0\n"}
    assert owners(tmp_path / "a", mounted)["driver"] == ["gpu-operator"]
    assert owners(tmp_path / "b", {"run/nvidia/nvidia-driver.pid": "42\n"})["driver"] == ["gpu-operator"]
    # the operator's other files under /run/nvidia (toolkit, validations) are not its driver
    others = {"proc/mounts": "tmpfs /run/nvidia/mps tmpfs rw 0 0\n", "run/nvidia/validations/toolkit-ready": ""}
    assert owners(tmp_path / "c", others)["driver"] == []


def test_the_device_plugins_sockets_and_the_dra_registration_are_advertisers(tmp_path: Path):
    files = {
        "var/lib/kubelet/device-plugins/nvidia-mig-1g.10gb.sock": "",  # the mixed MIG strategy's resource
        "var/lib/kubelet/device-plugins/kubelet.sock": "",  # the kubelet's own
        "var/lib/kubelet/plugins_registry/gpu.nvidia.com-5f1e2d-reg.sock": "",  # a rolling update's name
        "var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock": "",  # ComputeDomains, not GPUs
    }
    seen = read_owners(plant(tmp_path, files), KERNEL)
    assert [(e["owner"], e["evidence"]) for e in seen["advertiser"]] == [
        ("device-plugin", "/var/lib/kubelet/device-plugins/nvidia-mig-1g.10gb.sock"),
        ("dra", "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-5f1e2d-reg.sock"),
    ]


def test_another_kubelet_root_is_read_where_told(tmp_path: Path):
    root = plant(tmp_path, {"data/kubelet/device-plugins/nvidia-gpu.sock": ""})
    assert read_owners(root, KERNEL)["advertiser"] == []
    assert read_owners(root, KERNEL, "/data/kubelet")["advertiser"][0]["owner"] == "device-plugin"


def test_two_advertisers_conflict_naming_both_and_the_plan():
    seen = {
        "advertiser": [
            {"owner": "device-plugin", "evidence": DEVICE_PLUGIN_SOCKET},
            {"owner": "dra", "evidence": DRA_SOCKET},
        ]
    }
    assert owner_conflicts(seen, {"driver": "host", "advertiser": "dra"}) == [
        f"advertiser: both the device plugin ({DEVICE_PLUGIN_SOCKET}) and the DRA kubelet plugin ({DRA_SOCKET}) are "
        "registered; the plan's advertiser is dra"
    ]
    # without a plan (a host in no host group) two owners still conflict
    assert owner_conflicts(seen, {"driver": None, "advertiser": None})[0].endswith("are registered")


def test_one_owner_that_is_not_the_planned_one_conflicts():
    seen = {
        "driver": [{"owner": "gpu-operator", "evidence": "/run/nvidia/driver mounted"}],
        "advertiser": [{"owner": "device-plugin", "evidence": DEVICE_PLUGIN_SOCKET}],
    }
    assert owner_conflicts(seen, {"driver": "host", "advertiser": "none"}) == [
        "driver: the GPU Operator's driver container (/run/nvidia/driver mounted) owns the driver; the plan's driver "
        "is the host's (the nvidia_driver role)",
        f"advertiser: the device plugin ({DEVICE_PLUGIN_SOCKET}) is registered; the plan's advertiser is none",
    ]
    assert owner_conflicts(seen, {"driver": "gpu-operator", "advertiser": "device-plugin"}) == []


def test_no_owner_seen_is_no_conflict_here():
    """A driver or advertiser missing altogether is the driver check's (or the cluster's) to report."""
    assert owner_conflicts({"driver": [], "advertiser": []}, {"driver": "host", "advertiser": "dra"}) == []


@pytest.mark.parametrize(
    ("groups", "preinstalled", "expected"),
    [
        (["nvl72"], True, {"advertiser": "dra", "compute_domains": True, "driver_owner": "host"}),
        (["hgx"], True, {"advertiser": "dra", "compute_domains": False, "driver_owner": "host"}),
        (["nvl72"], False, {"advertiser": "dra", "compute_domains": True, "driver_owner": "gpu-operator"}),
        (["elsewhere"], True, {"advertiser": None, "compute_domains": False, "driver_owner": None}),
    ],
)
def test_the_host_view_names_the_planned_owners_and_compute_domains(groups, preinstalled, expected):
    """NVLink across hosts (GB200 NVL72, 4 GPUs a host) with advertiser dra: ComputeDomains, nvidia-imex masked; the
    H100 hosts' NVLink stays inside each host."""
    view = host_view(plan_file(NVL72), groups, driver_preinstalled=preinstalled)
    assert {key: view[key] for key in expected} == expected


def imex_state(enabled: str, active: str) -> DriverState:
    return DriverState(kernel=KERNEL, module="nvidia", imex_unit="nvidia-imex.service", imex_enabled=enabled,
                       imex_active=active)  # fmt: skip


def imex_problems(state: DriverState, mask: bool) -> list[str]:
    return [p for p in driver_problems(state, branch="580", mask_imex=mask) if "imex" in p]


def test_a_masked_stopped_imex_passes_on_a_compute_domain_host():
    assert imex_problems(imex_state("masked", "inactive"), True) == []


@pytest.mark.parametrize(
    ("enabled", "active", "expected"),
    [
        (
            "enabled",
            "active",
            ["nvidia-imex.service is enabled, not masked", "nvidia-imex.service is running (active)"],
        ),
        ("not-found", "inactive", ["nvidia-imex.service is not-found, not masked"]),
        ("masked", "active", ["nvidia-imex.service is running (active)"]),  # masked, never stopped
    ],
)
def test_an_unmasked_or_running_imex_fails_on_a_compute_domain_host(enabled: str, active: str, expected: list[str]):
    problems = imex_problems(imex_state(enabled, active), True)
    assert [p.split(":")[0] for p in problems] == expected
    assert all(p.endswith("(advertiser dra, NVLink across hosts)") for p in problems)


def test_imex_is_not_judged_elsewhere():
    assert imex_problems(imex_state("enabled", "active"), False) == []
