"""Controller-side filters of the gpu_operator and device_plugin roles: Helm values, chart versions and node labels
from a stack, computed by gpufleet.gpu_software (the code the Pulumi program uses), never by a template.

Each filter takes the stack as the ``gpufleet_stack`` lookup returns it (the stack file's ``gpufleet:`` keys),
validates it again (a hand-made dict is checked like a stack file) and plans it with the catalog.
"""

from __future__ import annotations

import json
from typing import Any

from ansible.errors import AnsibleFilterError


def _plan(stack_spec: Any) -> Any:
    """The stack's plan (gpufleet.plan.plan_spec, which reads the spec as JSON data, Ansible's tagged values too)."""
    from gpufleet.plan.hosts import plan_spec

    try:
        return plan_spec(stack_spec)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def _software(stack_spec: Any, driver_preinstalled: bool = True, toolkit_preinstalled: bool = True) -> Any:
    from gpufleet.gpu_software import for_baremetal

    plan = _plan(stack_spec)
    if plan.baremetal is None:
        raise AnsibleFilterError(f"stack {plan.stack} has no bare-metal hosts")
    return for_baremetal(
        plan.host_groups,
        plan.baremetal.mig_parted_config,
        driver_preinstalled=driver_preinstalled,
        toolkit_preinstalled=toolkit_preinstalled,
    )


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    raise AnsibleFilterError(f"{name} must be true or false, not {value!r}")


def gpufleet_gpu_operator_values(
    stack_spec: dict[str, Any], driver_preinstalled: bool = True, toolkit_preinstalled: bool = True
) -> dict[str, Any]:
    """GPU Operator chart values for the stack's bare-metal hosts (gpu_software.operator_values); with
    ``driver_preinstalled`` / ``toolkit_preinstalled`` (the nvidia_driver / nvidia_container_toolkit roles
    installed them) the operator's driver / toolkit daemonsets are off."""
    from gpufleet.gpu_software import operator_values

    driver = _bool(driver_preinstalled, "driver_preinstalled")
    toolkit = _bool(toolkit_preinstalled, "toolkit_preinstalled")
    return operator_values(_software(stack_spec, driver, toolkit))


def gpufleet_device_plugin_values(stack_spec: dict[str, Any]) -> dict[str, Any]:
    """Device plugin chart values for the stack's bare-metal hosts (gpu_software.device_plugin_values), whose
    driver and toolkit the host roles installed; ``config.map`` holds gpu_software.device_plugin_configs."""
    from gpufleet.gpu_software import device_plugin_values

    return device_plugin_values(_software(stack_spec))


def gpufleet_helm_chart_version(stack_spec: dict[str, Any], chart: str) -> str:
    """The pinned version of ``chart`` (``gpu-operator`` or ``nvidia-device-plugin``) from the stack's
    ``gpufleet:release``, written as the chart's repository lists it."""
    from gpufleet.gpu_software import chart_version

    try:
        return chart_version(chart, _plan(stack_spec).release)
    except ValueError as exc:
        raise AnsibleFilterError(f"gpufleet_helm_chart_version: {exc}") from exc


def gpufleet_gpu_node_labels(
    stack_spec: dict[str, Any], group_names: str | list[str], chart: str = "gpu-operator", patch: bool = False
) -> dict[str, str | None]:
    """The node labels ``chart``'s software reads, for a host of the stack's host group ``group_names`` (a
    group name, or a host's ``group_names``: the first of the stack's host groups, in the stack's order, the
    host belongs to). With ``patch``, the labels gpufleet owns that do not apply map to None: a merge patch
    that removes them."""
    from gpufleet.gpu_software import NODE_LABELS, label_patch

    plan = _plan(stack_spec)
    if plan.baremetal is None:
        raise AnsibleFilterError(f"stack {plan.stack} has no bare-metal hosts")
    if isinstance(group_names, str):  # a group named outright (its check names the stack's groups)
        group = group_names
    else:
        names = [str(n) for n in group_names]
        found = plan.host_group_of(names)
        if found is None:
            groups = ", ".join(g.name for g in plan.host_groups)
            raise AnsibleFilterError(
                f"the host is in none of stack {plan.stack}'s host groups ({groups}); its inventory groups:"
                f" {', '.join(names) or '(none)'}"
            )
        group = found.name
    try:
        if chart not in NODE_LABELS:
            raise ValueError(f"unknown chart {chart!r}; one of {', '.join(NODE_LABELS)}")
        labels = plan.host_group(group).node_labels[chart]
    except ValueError as exc:
        raise AnsibleFilterError(f"gpufleet_gpu_node_labels: {exc}") from exc
    return label_patch(chart, labels) if _bool(patch, "patch") else dict(labels)


def _literal_blocks(value: Any) -> Any:
    from ruamel.yaml.scalarstring import LiteralScalarString

    if isinstance(value, dict):
        return {str(k): _literal_blocks(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal_blocks(v) for v in value]
    if isinstance(value, str):
        return LiteralScalarString(str(value)) if "\n" in value else str(value)
    return value


def gpufleet_helm_values_yaml(values: dict[str, Any]) -> str:
    """Helm values as YAML for people and diffs: keys in gpu_software's order, and the configs embedded as
    strings (device-plugin configs, the mig-parted config) as literal blocks rather than escaped one-liners."""
    from io import StringIO

    from ruamel.yaml import YAML

    yaml = YAML(typ="rt", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = StringIO()
    yaml.dump(_literal_blocks(json.loads(json.dumps(values))), out)
    return out.getvalue()


# A Node manifest for a GitOps tool only adds labels to a Node the kubelet registered: applied server-side (the
# labels it stops listing are removed, other fields are left alone) and never pruned (that would delete the Node).
GITOPS_ANNOTATIONS = {
    "argocd.argoproj.io/sync-options": "Prune=false,ServerSideApply=true",
    "kustomize.toolkit.fluxcd.io/prune": "disabled",
}


def gpufleet_node_labels_manifest(labels: dict[str, Any], node: str) -> dict[str, Any]:
    """The Node object an Argo CD / Flux application applies to give ``node`` the ``labels`` (a label patch's
    None values are left out: server-side apply removes labels the manifest no longer lists)."""
    kept = {str(k): str(v) for k, v in labels.items() if v is not None}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": str(node), "annotations": dict(GITOPS_ANNOTATIONS), "labels": kept},
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpufleet_gpu_operator_values": gpufleet_gpu_operator_values,
            "gpufleet_device_plugin_values": gpufleet_device_plugin_values,
            "gpufleet_helm_chart_version": gpufleet_helm_chart_version,
            "gpufleet_gpu_node_labels": gpufleet_gpu_node_labels,
            "gpufleet_node_labels_manifest": gpufleet_node_labels_manifest,
            "gpufleet_helm_values_yaml": gpufleet_helm_values_yaml,
        }
