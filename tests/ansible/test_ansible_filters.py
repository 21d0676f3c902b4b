"""The controller-side filters the roles use: RHEL's grubby commands, CPU lists, topology plans (a host's profile
from its group: tests/unit/plan/test_plan_hosts.py)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("gpufleet_filters", REPO / "ansible/plugins/filter/gpufleet.py")
filters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(filters)

GRUBBY_INFO = """index=0
kernel="/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64"
args="ro crashkernel=1G-4G:192M,4G-64G:256M rd.lvm.lv=rhel/root quiet iommu=pt"
root="/dev/mapper/rhel-root"
"""


def test_grubby_adds_only_missing_arguments_and_removes_present_ones():
    add = ["default_hugepagesz=1G", "hugepagesz=1G", "hugepages=0:4,1:4", "iommu=pt"]
    assert filters.gpufleet_grubby_commands(GRUBBY_INFO, add, ["quiet", "rhgb"]) == [
        ["grubby", "--update-kernel=ALL", "--remove-args=quiet"],
        ["grubby", "--update-kernel=ALL", "--args=default_hugepagesz=1G hugepagesz=1G hugepages=0:4,1:4"],
    ]


def test_grubby_is_idempotent_once_the_arguments_are_in_place():
    info = GRUBBY_INFO.replace("quiet iommu=pt", "iommu=pt default_hugepagesz=1G")
    assert filters.gpufleet_grubby_commands(info, ["default_hugepagesz=1G", "iommu=pt"], ["quiet"]) == []


def test_grubby_deduplicates_wanted_arguments():
    assert filters.gpufleet_grubby_commands('args="ro"', ["a=1", "a=1"], []) == [
        ["grubby", "--update-kernel=ALL", "--args=a=1"]
    ]


@pytest.mark.parametrize(("text", "cpus"), [("0,2", [0, 2]), ("0 2", [0, 2]), ("0-3\n", [0, 1, 2, 3]), ("", [])])
def test_cpu_lists_as_the_kernel_and_systemd_print_them(text, cpus):
    assert filters.gpufleet_cpus(text) == cpus


def test_cpu_list_junk_is_refused_with_the_value():
    with pytest.raises(Exception, match="'0,2\\\\n---gpufleet---' is not a CPU list"):
        filters.gpufleet_cpus("0,2\n---gpufleet---")
    assert filters.gpufleet_cpulist([0, 1, 2, 5]) == "0-2,5"


def test_topology_plan_filter_takes_ansible_data_and_refuses_bad_profiles():
    from gpufleet.host.hostfacts import read_host

    facts = read_host(str(REPO / "tests/fixtures/hosts/no-gpu"))
    plan = filters.gpufleet_topology_plan(facts, {"vfs_per_nic": 4}, "cpu1")
    assert plan["host"] == "cpu1" and len(plan["sriov"]) == 2
    with pytest.raises(Exception, match="invalid tuning profile"):
        filters.gpufleet_topology_plan(facts, {"vfs_per_nic": -1}, "cpu1")
    with pytest.raises(Exception, match="supports 128 VFs"):
        filters.gpufleet_topology_plan(facts, {"vfs_per_nic": 200}, "cpu1")
