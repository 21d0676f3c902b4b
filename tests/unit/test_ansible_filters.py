"""The controller-side filters the roles use: RHEL's grubby commands, host profiles, CPU lists."""

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


def test_host_profile_is_the_profile_of_the_hosts_group():
    from gpufleet.spec import load_stack

    stack = load_stack(REPO / "Pulumi.lab-local.yaml").stack.model_dump(mode="json")
    stack["tuning_profiles"]["train"] = {"cores_per_gpu": 6}
    stack["baremetal"]["host_groups"].insert(0, {"name": "dgx", "tuning_profile": "train"})
    assert filters.gpufleet_host_profile(stack, ["all", "dgx"])["cores_per_gpu"] == {"min": 6, "max": 6}
    assert filters.gpufleet_host_profile(stack, ["lab", "dgx"])["cores_per_gpu"] == {"min": 6, "max": 6}  # first
    assert filters.gpufleet_host_profile(stack, ["lab"])["reserved_cores"] == 2
    assert filters.gpufleet_host_profile(stack, ["other"])["cores_per_gpu"] == {"min": 4, "max": 16}  # the default
    stack["baremetal"]["host_groups"][0]["tuning_profile"] = "missing"
    with pytest.raises(Exception, match=r"(?s)gpufleet_host_profile: invalid stack:.*unknown tuning profile 'missing'"):
        filters.gpufleet_host_profile(stack, ["dgx"])


@pytest.mark.parametrize(("text", "cpus"), [("0,2", [0, 2]), ("0 2", [0, 2]), ("0-3\n", [0, 1, 2, 3]), ("", [])])
def test_cpu_lists_as_the_kernel_and_systemd_print_them(text, cpus):
    assert filters.gpufleet_cpus(text) == cpus


def test_cpu_list_junk_is_refused_with_the_value():
    with pytest.raises(Exception, match="'0,2\\\\n---gpufleet---' is not a CPU list"):
        filters.gpufleet_cpus("0,2\n---gpufleet---")
    assert filters.gpufleet_cpulist([0, 1, 2, 5]) == "0-2,5"


def test_topology_plan_filter_takes_ansible_data_and_refuses_bad_profiles():
    from gpufleet.hostfacts import read_host

    facts = read_host(str(REPO / "tests/fixtures/hosts/no-gpu"))
    plan = filters.gpufleet_topology_plan(facts, {"vfs_per_nic": 4}, "cpu1")
    assert plan["host"] == "cpu1" and len(plan["sriov"]) == 2
    with pytest.raises(Exception, match="invalid tuning profile"):
        filters.gpufleet_topology_plan(facts, {"vfs_per_nic": -1}, "cpu1")
    with pytest.raises(Exception, match="supports 128 VFs"):
        filters.gpufleet_topology_plan(facts, {"vfs_per_nic": 200}, "cpu1")
