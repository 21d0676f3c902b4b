"""How ansible/site.yml wires the AMD roles: where they run in the play and on which hosts, their conditions
evaluated (as Jinja expressions, Ansible's own dialect for ``when``) against the host views gpufleet's plan gives
(a host group whose partitions the host manages, one whose partitions the AMD GPU Operator manages, none), and the
variables each role gets from the stack's plan. The roles themselves are run by test_amd_partition_role.py,
test_amd_driver_role.py and, installed for real, by the lab (tests/lab/test_containers.py)."""

from __future__ import annotations

from typing import Any

import jinja2
import pytest
import yaml

from tests.conftest import REPO

SITE = yaml.safe_load((REPO / "ansible/site.yml").read_text())[0]
JINJA = jinja2.Environment()


def task(section: str, name: str) -> dict[str, Any]:
    return next(t for t in SITE[section] if t.get("name") == name)


def names(section: str) -> list[str]:
    return [t.get("name") for t in SITE[section]]


def holds(conditions: str | list[str], **variables: Any) -> bool:
    conditions = [conditions] if isinstance(conditions, str) else conditions
    return all(bool(JINJA.compile_expression(c)(**variables)) for c in conditions)


MI300X = [{"pci": "0000:05:00.0", "vendor": "1002"}]
PARTITIONS = {"managed_by": "host", "memory": "NPS4", "groups": [{"compute": "CPX", "gpus": "all"}], "skipped_gpus": []}


def test_the_amd_gpus_are_the_topologys_vendor_1002_gpus():
    facts = task("pre_tasks", "Note the host's NVIDIA GPUs (PCI vendor 10de) and AMD GPUs (1002)")
    expression = facts["ansible.builtin.set_fact"]["gpufleet_amd_gpus"].removeprefix("{{").removesuffix("}}")
    gpus = [{"vendor": "10de", "pci": "a"}, {"vendor": "1002", "pci": "b"}]
    assert [g["pci"] for g in JINJA.compile_expression(expression)(gpu_topology={"gpus": gpus})] == ["b"]


def test_amd_driver_runs_after_the_nvidia_driver_on_hosts_with_amd_gpus_with_the_stacks_releases():
    order = names("tasks")
    block = task("tasks", "Install AMD's driver and ROCm (hosts with AMD GPUs)")
    assert order.index(block["name"]) == order.index("Install the NVIDIA driver (hosts with NVIDIA GPUs)") + 1
    assert holds(block["when"], gpufleet_amd_gpus=MI300X) and not holds(block["when"], gpufleet_amd_gpus=[])
    refuse, include = block["block"]
    release = {"amdgpu": "30.10.1", "rocm": "7.0.1"}
    assert holds(refuse["ansible.builtin.assert"]["that"], gpufleet_stack_plan={"release": release})
    assert not holds(refuse["ansible.builtin.assert"]["that"], gpufleet_stack_plan={"release": {"amdgpu": None}})
    assert include["ansible.builtin.include_role"] == {"name": "amd_driver"}
    assert include["vars"] == {
        "amd_driver_amdgpu_version": "{{ gpufleet_stack_plan.release.amdgpu }}",
        "amd_driver_rocm_version": "{{ gpufleet_stack_plan.release.rocm }}",
        "amd_driver_gpus": "{{ gpufleet_amd_gpus }}",
        "amd_driver_kernel_args": "{{ gpufleet_plan.kernel_arg_groups.amdgpu }}",  # the topology planner's
        "amd_driver_reboot_ok": False,  # the play reboots once
        "amd_driver_kernel_args_reboot_ok": "{{ gpufleet_reboot_ok }}",
    }


def test_the_plays_one_reboot_also_honours_amd_driver_reboot_required():
    reboot = task("post_tasks", "Reboot into the new AMD driver when allowed")
    assert reboot["notify"] == "Reboot to apply kernel arguments"
    assert holds(reboot["when"], amd_driver_reboot_required=True, gpufleet_reboot_ok=True)
    assert not holds(reboot["when"], amd_driver_reboot_required=True, gpufleet_reboot_ok=False)
    assert not holds(reboot["when"], gpufleet_reboot_ok=True)  # no AMD host: undefined


@pytest.mark.parametrize(
    ("plan", "reboot_required", "rebooted", "runs"),
    [
        ({"amd_partitions": PARTITIONS}, False, False, True),
        ({"amd_partitions": PARTITIONS}, True, True, True),  # after the play's reboot into the new driver
        ({"amd_partitions": PARTITIONS}, True, False, False),  # the new driver is not running yet
        ({"amd_partitions": PARTITIONS | {"managed_by": "operator"}}, False, False, False),  # the operator's DCM
        ({"amd_partitions": None}, False, False, False),
        ({}, False, False, False),  # a plan from before amd_partitions
    ],
)
def test_amd_partition_runs_after_the_reboot_where_the_host_manages_partitions(plan, reboot_required, rebooted, runs):
    order = names("post_tasks")
    apply = task("post_tasks", "Set the AMD GPUs' partitions (host groups whose amd_partitions the host manages)")
    assert order.index("Reboot now if needed") < order.index(apply["name"])
    assert order.index(apply["name"]) < order.index("Verify the host's state against its plan")
    variables = {
        "gpufleet_amd_gpus": MI300X,
        "gpufleet_stack_plan": plan,
        "amd_driver_reboot_required": reboot_required,
        "gpufleet_rebooted": rebooted,
    }
    assert holds(apply["when"], **variables) is runs
    wait = task("post_tasks", "Say why the AMD GPUs' partitions wait")
    host_managed = bool(plan.get("amd_partitions")) and plan["amd_partitions"]["managed_by"] == "host"
    assert holds(wait["when"], **variables) is (host_managed and reboot_required and not rebooted)
    assert not holds(apply["when"], **variables | {"gpufleet_amd_gpus": []})
    assert apply["vars"] == {
        "amd_partition_memory": "{{ gpufleet_stack_plan.amd_partitions.memory }}",
        "amd_partition_groups": "{{ gpufleet_stack_plan.amd_partitions.groups }}",
        "amd_partition_skipped_gpus": "{{ gpufleet_stack_plan.amd_partitions.skipped_gpus | default([]) }}",
        "amd_partition_reload_ok": "{{ gpufleet_reboot_ok }}",  # a driver reload only where reboots are allowed
    }


def test_the_verify_block_checks_amds_driver_and_the_partitions_as_applied():
    verify = task("post_tasks", "Verify the host's state against its plan")["block"]
    driver = next(t for t in verify if t["name"] == "Verify AMD's driver and ROCm (hosts with AMD GPUs)")
    assert driver["ansible.builtin.include_role"] == {"name": "amd_driver", "tasks_from": "verify"}
    parts = next(t for t in verify if t["name"] == "Verify the AMD GPUs' partitions")
    apply = task("post_tasks", "Set the AMD GPUs' partitions (host groups whose amd_partitions the host manages)")
    assert parts["ansible.builtin.include_role"] == {"name": "amd_partition", "tasks_from": "verify"}
    assert (parts["vars"], parts["when"]) == (apply["vars"], apply["when"])
