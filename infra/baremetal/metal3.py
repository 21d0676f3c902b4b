"""``baremetal.engine: metal3``: the stack's hosts as Metal3 ``BareMetalHost`` objects on its management cluster.

The program does not touch BMCs with this engine. :class:`Metal3Hosts` creates, through pulumi-kubernetes and a
provider built from the management cluster's kubeconfig (a Pulumi secret), one credentials ``Secret`` and one
``BareMetalHost`` per host (the objects :mod:`gpufleet.baremetal.metal3` renders); the Bare Metal Operator and Ironic
register, inspect, provision and power the hosts. Each host's ``status`` is read back into outputs (provisioning state,
power, the serial inspection found), so ``pulumi refresh`` shows what the operator reports.

- By default ``pulumi up`` waits, per host, until the operator reports the state the spec leads to (``provisioned``,
  ``externally provisioned`` or ``available``): pulumi-kubernetes' ``pulumi.com/waitFor`` annotation (4.18+,
  experimental) with a JSONPath on ``status.provisioning.state``. Inspection, cleaning and deployment take long
  on real servers, hence the generous create/update timeout. A host in the operator's ``error`` state fails the
  wait at the timeout and names that host; the others go on.
- Fields the operator's webhook will not change in place (baremetal-operator v0.13.2,
  ``internal/webhooks/metal3.io/v1alpha1/baremetalhost_validation.go``: the BMC address after registration, a set
  ``bootMACAddress``, ``externallyProvisioned`` back to false) replace the host: delete first (the name is fixed),
  which deprovisions it, then create.
- The namespace must exist and be one the operator watches; it is not created here (deleting the stack must never
  delete the operator's namespace).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.apiextensions.CustomResource import CustomResourceArgs

from gpufleet.baremetal.metal3 import API_VERSION, KIND, Metal3Host, bare_metal_host, host_status, secret_data
from infra.baremetal import secret_config

WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
# Changes the operator refuses in place (see the module docstring): the host is replaced instead.
REPLACE_ON_CHANGES = ("spec.bmc.address", "spec.bootMACAddress", "spec.externallyProvisioned")
PROVISIONING_TIMEOUT = "90m"  # registration + inspection + cleaning + deployment of a GPU server
DEPROVISIONING_TIMEOUT = "60m"  # deletion waits for the operator's finalizer: deprovisioning and cleaning


class BareMetalHostResource(CustomResource):
    """A ``BareMetalHost`` custom resource whose ``status`` is an output. The SDK's ``CustomResource`` declares no
    ``status`` (pulumi-kubernetes #1836), so the Python SDK would drop what the provider returns; this registers it
    as an output property, as the SDK's built-in kinds (``core.v1.Service``...) do."""

    status: pulumi.Output[Any]

    def _internal_init(  # the SDK's hook: CustomResource.__init__ calls it with these arguments
        self,
        resource_name: str,
        api_version: str,
        kind: str,
        opts: pulumi.ResourceOptions | None = None,
        metadata: pulumi.Input[Any] | None = None,
        spec: Any | None = None,
        __props__: Any = None,
    ) -> None:
        props = CustomResourceArgs.__new__(CustomResourceArgs)
        props.__dict__.update(api_version=api_version, kind=kind, metadata=metadata, spec=spec, status=None)
        pulumi.CustomResource.__init__(self, f"kubernetes:{api_version}:{kind}", resource_name, props, opts)


@dataclass(frozen=True)
class Metal3HostsArgs:
    hosts: Sequence[Metal3Host]
    kubeconfig: pulumi.Input[str]  # the management cluster's kubeconfig (made a secret here whatever it was)
    passwords: Mapping[str, pulumi.Input[str]]  # Metal3Host.password_key -> the BMC password
    wait_for_state: bool = True  # pulumi up waits until each host reaches Metal3Host.target_state
    provisioning_timeout: str = PROVISIONING_TIMEOUT


@dataclass
class Metal3HostResources:
    """What one host became: its Secret, its BareMetalHost and the status read back from it."""

    secret: k8s.core.v1.Secret
    host: BareMetalHostResource
    status: pulumi.Output[dict[str, Any]]  # HostStatus.to_outputs()


def passwords_from_config(hosts: Sequence[Metal3Host]) -> dict[str, pulumi.Output[str]]:
    """The BMC passwords the hosts name, read from the stack's secret config (each key once)."""
    return {key: secret_config(key) for key in dict.fromkeys(h.password_key for h in hosts)}


class Metal3Hosts(pulumi.ComponentResource):
    """The stack's bare-metal hosts as Metal3 BareMetalHosts on the management cluster, with their states."""

    provider: k8s.Provider
    kubeconfig: pulumi.Output[str]
    hosts: dict[str, Metal3HostResources]

    def __init__(self, name: str, args: Metal3HostsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        missing = sorted({h.password_key for h in args.hosts} - set(args.passwords))
        if missing:  # before anything is registered
            raise ValueError(f"no BMC password given for {', '.join(missing)}")
        super().__init__("gpufleet:baremetal:Metal3Hosts", name, None, opts)
        self.kubeconfig = pulumi.Output.secret(args.kubeconfig)
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig, opts=pulumi.ResourceOptions(parent=self)
        )
        self.hosts = {host.name: self._host(name, host, args) for host in args.hosts}
        self.register_outputs({"hosts": {name: resources.status for name, resources in self.hosts.items()}})

    def _host(self, name: str, host: Metal3Host, args: Metal3HostsArgs) -> Metal3HostResources:
        on_cluster = pulumi.ResourceOptions(parent=self, provider=self.provider)
        password = pulumi.Output.secret(args.passwords[host.password_key])
        secret = k8s.core.v1.Secret(
            f"{name}-{host.name}-bmc",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=host.credentials_name, namespace=host.namespace, labels=dict(host.labels)
            ),
            type="Opaque",
            data=password.apply(lambda value: secret_data(host.username, value)),
            opts=on_cluster,
        )
        obj = bare_metal_host(host)
        annotations = {}
        if args.wait_for_state:
            annotations[WAIT_FOR_ANNOTATION] = f"jsonpath={{.status.provisioning.state}}={host.target_state}"
        bmh = BareMetalHostResource(
            f"{name}-{host.name}",
            api_version=API_VERSION,
            kind=KIND,
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=host.name,
                namespace=host.namespace,
                labels=obj["metadata"].get("labels"),
                annotations=annotations or None,
            ),
            spec=obj["spec"],
            opts=pulumi.ResourceOptions.merge(
                on_cluster,
                pulumi.ResourceOptions(
                    depends_on=[secret],
                    replace_on_changes=list(REPLACE_ON_CHANGES),
                    delete_before_replace=True,
                    custom_timeouts=pulumi.CustomTimeouts(
                        create=args.provisioning_timeout,
                        update=args.provisioning_timeout,
                        delete=DEPROVISIONING_TIMEOUT,
                    ),
                ),
            ),
        )
        status = bmh.status.apply(lambda value: host_status(value).to_outputs())
        return Metal3HostResources(secret=secret, host=bmh, status=status)
