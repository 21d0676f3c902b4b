"""Run gpufleet's Pulumi program under ``pulumi.runtime.set_mocks`` and record every resource it registers.

Mocks accept anything, so the records are what the checks in ``tests/infra/checks.py`` look at: the inputs each
resource would send to Azure or Kubernetes, as the provider gets them (camelCase keys, enums as their values).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi

from tests.conftest import REPO

# A stand-in kubeconfig for the AKS credentials call (the shape AKS returns: base64 of a kubeconfig).
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: aks, cluster: {server: "https://aks.invalid:443"}}]
users: [{name: clusterUser, user: {token: mock-token}}]
contexts: [{name: aks, context: {cluster: aks, user: clusterUser}}]
current-context: aks
"""
CREDENTIALS_TOKEN = "azure-native:containerservice:listManagedClusterUserCredentials"
NAT_IP = "198.51.100.200"  # the address the mocks give a created public IP (a documentation address)


@dataclass
class Registered:
    type: str
    name: str
    inputs: dict[str, Any]
    provider: str | None


@dataclass
class Recorder(pulumi.runtime.Mocks):
    resources: list[Registered] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.resources.append(Registered(args.typ, args.name, dict(args.inputs), args.provider))
        outputs = dict(args.inputs)
        if args.typ == "azure-native:containerservice:ManagedCluster":
            outputs["nodeResourceGroup"] = f"MC_{args.inputs.get('resourceName', args.name)}"
        if args.typ == "azure-native:network:PublicIPAddress":
            outputs["ipAddress"] = NAT_IP  # Azure assigns a static address on creation

        if args.typ.startswith("azure-native:"):
            outputs.setdefault("name", args.inputs.get("resourceName") or args.name)
        return f"/mock/{args.typ}/{args.name}", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        self.calls.append((args.token, dict(args.args)))
        if args.token == CREDENTIALS_TOKEN:
            value = base64.b64encode(KUBECONFIG.encode()).decode()
            return {"kubeconfigs": [{"name": "clusterUser", "value": value}]}
        return {}

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.type == typ]


@dataclass
class Run:
    recorder: Recorder
    outputs: dict[str, Any]
    kubeconfig_secret: bool


def run_program(stack: str, root: Path = REPO, recorder: Recorder | None = None) -> Run:
    """Evaluate the program for ``stack`` (``root/Pulumi.<stack>.yaml``) under mocks; every registration done."""
    from infra.program import main

    recorder = recorder if recorder is not None else Recorder()
    pulumi.runtime.set_mocks(recorder, project="gpufleet", stack=stack, preview=False)
    result: dict[str, Any] = {}

    @pulumi.runtime.test
    def evaluate() -> pulumi.Output[Any]:
        program = main(stack, root)
        cluster = program.cluster

        def keep(values: list[Any]) -> None:
            result.update(zip(("cluster_name", "cluster_id", "node_resource_group", "kubeconfig"), values, strict=True))

        done = pulumi.Output.all(
            cluster.cluster.name, cluster.cluster.id, cluster.cluster.node_resource_group, cluster.kubeconfig
        ).apply(keep)
        secret = pulumi.Output.from_input(cluster.kubeconfig.is_secret()).apply(
            lambda is_secret: result.update(kubeconfig_secret=is_secret)
        )
        return pulumi.Output.all(done, secret, program.software.release.id)

    evaluate()
    return Run(recorder, result, bool(result.get("kubeconfig_secret")))
