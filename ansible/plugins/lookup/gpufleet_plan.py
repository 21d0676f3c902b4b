"""Lookup gpufleet_plan: a stack's plan (Pulumi.<stack>.yaml validated and planned by gpufleet), as plain data.

An invalid stack fails the lookup with gpufleet's file:line: key.path: message errors, before any host is touched.
Each stack file is validated and planned once per content (gpufleet.plan.hosts.plan_file), however often a play
looks it up.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpufleet_plan
short_description: A gpufleet stack's plan, for a play or for one host
description:
  - Loads C(Pulumi.<stack>.yaml) from the gpufleet project (the nearest C(Pulumi.yaml) above the playbook),
    validates and plans it, and returns the plan's view for a play (gpufleet.plan.hosts.stack_view), or with
    I(group_names) the view of one host (gpufleet.plan.hosts.host_view).
options:
  _terms:
    description: Stack name (e.g. lab-local) or path to a stack file.
    required: true
  group_names:
    description: The host's inventory groups (Ansible's C(group_names)); the host view of the first of the stack's
      host groups among them.
    type: list
    elements: str
  driver_preinstalled:
    description: The nvidia_driver role installed the driver (the GPU Operator's driver daemonset stays off).
    type: bool
    default: true
  toolkit_preinstalled:
    description: The nvidia_container_toolkit role installed the toolkit (the operator's toolkit daemonset stays off).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: The stack's rollout batches
  hosts: all
  serial: "{{ lookup('gpufleet_plan', gpufleet_stack).rollout.serial }}"
  tasks:
    - name: The host's part of the plan, once
      ansible.builtin.set_fact:
        gpufleet_stack_plan: "{{ lookup('gpufleet_plan', gpufleet_stack, group_names=group_names) }}"
"""

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError

from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        from gpufleet.common.plaindata import plain_data
        from gpufleet.plan.hosts import host_view, plan_file, stack_view
        from gpufleet.spec.files import StackNotFound, find_project_root, resolve_stack

        self.set_options(var_options=variables, direct=kwargs)
        group_names = self.get_option("group_names")
        flags = {name: self.get_option(name) for name in ("driver_preinstalled", "toolkit_preinstalled")}
        root = find_project_root(Path((variables or {}).get("playbook_dir") or "."))
        out = []
        for term in terms:
            try:
                plan = plan_file(resolve_stack(str(term), root))
                if group_names is None:
                    out.append(stack_view(plan))
                else:
                    out.append(host_view(plan, plain_data(group_names), **flags))
            except (StackNotFound, ValueError, OSError) as exc:  # InvalidStackFile is a ValueError
                raise AnsibleLookupError(str(exc)) from None
        return out
