"""The AKS REST API's published definitions gpufleet's typed AgentPool model is held to (extracts vendored in
tests/fixtures/aks-api/, see its PROVENANCE.md), and the Karpenter CRD schemas of node auto-provisioning
(tests/fixtures/crds/karpenter/)."""

from __future__ import annotations

import functools
import json
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from tests.charts import crd_validator
from tests.conftest import FIXTURES

AKS_API = FIXTURES / "aks-api"
KARPENTER_CRDS = FIXTURES / "crds" / "karpenter"


@functools.cache
def definitions(version: str) -> dict[str, Any]:
    """The vendored definitions of AKS API ``version`` (``2026-05-01``, ``2026-05-02-preview``)."""
    data = json.loads((AKS_API / f"{version}.definitions.json").read_text())
    assert data["info"]["version"] == version
    return data["definitions"]


def enum(version: str, name: str) -> list[str]:
    """The values of enum definition ``name`` in API ``version``."""
    return list(definitions(version)[name]["enum"])


def field_definition(version: str, path: str) -> dict[str, Any] | None:
    """The definition a property path under an AgentPool's ``properties`` leads to (``gpuProfile.nvidia.migStrategy``
    -> MigStrategy), through the vendored definitions from ``GPUProfile`` down; None where the version has no such
    property. Only paths under ``gpuProfile`` are vendored."""
    head, *rest = path.split(".")
    assert head == "gpuProfile", f"only gpuProfile's definitions are vendored, not {path}"
    node = definitions(version)["GPUProfile"]
    for key in rest:
        prop = node.get("properties", {}).get(key)
        if prop is None:
            return None
        node = definitions(version).get(prop["$ref"].rsplit("/", 1)[1], {})
    return node


@functools.cache
def _crd_validator(file: str, api_version: str) -> Draft202012Validator:
    crd = yaml.load((KARPENTER_CRDS / file).read_text(), Loader=yaml.CSafeLoader)
    (version,) = [v for v in crd["spec"]["versions"] if f"{crd['spec']['group']}/{v['name']}" == api_version]
    return crd_validator(version["schema"]["openAPIV3Schema"])


def karpenter_validator(obj: dict[str, Any]) -> Draft202012Validator:
    """The vendored CRD schema of a NAP object by its kind and apiVersion (unknown fields refused)."""
    files = {"AKSNodeClass": "karpenter.azure.com_aksnodeclasses.yaml", "NodePool": "karpenter.sh_nodepools.yaml"}
    return _crd_validator(files[obj["kind"]], obj["apiVersion"])
