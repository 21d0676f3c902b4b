"""Controller-side filters of the gpu_chart role: the files it writes for people and GitOps tools. The values,
chart version and node labels themselves are the plan's (the ``gpufleet_plan`` lookup's host view, computed by
gpufleet.kube.gpu_software, the code the Pulumi program uses), never a template's.
"""

from __future__ import annotations

import json
from typing import Any


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
            "gpufleet_node_labels_manifest": gpufleet_node_labels_manifest,
            "gpufleet_helm_values_yaml": gpufleet_helm_values_yaml,
        }
