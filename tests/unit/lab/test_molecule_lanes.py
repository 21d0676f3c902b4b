"""The lab session's two Molecule lanes (tests/lab/conftest.py): system containers apart from VMs."""

from __future__ import annotations

from tests.lab import molecule_runner as runner


def test_with_two_jobs_the_container_scenarios_get_their_own_lane_and_the_vm_scenarios_share_the_other():
    lanes = {role: runner.lane(role, 2) for role in runner.ROLES}
    assert {r for r, lane in lanes.items() if lane == "containers"} == {
        "amd_driver", "amd_partition", "device_plugin", "gpu_operator", "mig", "nvidia_container_toolkit"
    }  # fmt: skip
    assert {"hugepages", "kernel_cmdline", "numa_pinning", "sriov", "nvidia_driver", "vfio"} <= {
        r for r, lane in lanes.items() if lane == "vms"
    }


def test_with_one_job_every_scenario_runs_in_one_lane():
    assert {runner.lane(role, 1) for role in runner.ROLES} == {"vms"}
