"""infra.baremetal.metal3 under Pulumi mocks: one Secret + one BareMetalHost per host through the management
cluster's provider, the BMC password and the kubeconfig only as secrets, each host's state read back from the
operator's status, and the options that make `pulumi up` wait for a host and replace it where Metal3 must."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

import kubernetes_validate
import pulumi
import pytest
from pulumi.runtime import rpc

from gpufleet.baremetal import metal3
from infra.baremetal.metal3 import (
    WAIT_FOR_ANNOTATION,
    Metal3Hosts,
    Metal3HostsArgs,
    passwords_from_config,
)
from tests.infra.harness import Recorder
from tests.unit.baremetal.test_metal3 import PASSWORD, schema_errors, stack_host

BMH = "kubernetes:metal3.io/v1alpha1:BareMetalHost"
SECRET = "kubernetes:core/v1:Secret"
PROVIDER = "pulumi:providers:kubernetes"
KUBECONFIG = "apiVersion: v1\nkind: Config\nusers: [{name: admin, user: {token: kube-token-0123}}]\n"
# what the mocked operator reports per host (status.provisioning.state, poweredOn, the serial inspection found)
OPERATOR_STATUS = {
    "gpu-a01": {
        "operationalStatus": "OK",
        "poweredOn": True,
        "provisioning": {"state": "provisioned"},
        "hardware": {"systemVendor": {"serialNumber": "SN-0001"}},
    },
    "gpu-a02": {"operationalStatus": "OK", "poweredOn": False, "provisioning": {"state": "externally provisioned"}},
}
HOSTS = metal3.hosts_from_stack(
    [
        stack_host(),
        stack_host(
            name="gpu-a02",
            system_id="2",
            serial="SN-0002",
            boot_mac="aa:bb:cc:dd:ee:02",
            power="off",
            boot={"source": "disk", "image_url": None, "image_checksum": None},
            bmc={"password": {"secret": "gpufleet:bmc_password_b"}},
        ),
    ],
    "metal3",
)
PASSWORDS = {"gpufleet:bmc_password": PASSWORD, "gpufleet:bmc_password_b": PASSWORD + "-b"}


class OperatorRecorder(Recorder):
    """The harness's recorder, with the Metal3 operator's status on every BareMetalHost it creates."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        id_, outputs = super().new_resource(args)
        if args.typ == BMH:
            outputs["status"] = OPERATOR_STATUS[args.inputs["metadata"]["name"]]
        return id_, outputs


@dataclass
class Run:
    recorder: OperatorRecorder
    statuses: dict[str, dict[str, Any]] = field(default_factory=dict)
    kubeconfig_secret: bool = False
    registered: dict[str, Any] = field(default_factory=dict)  # what the component passed to register_outputs
    options: dict[str, pulumi.ResourceOptions] = field(default_factory=dict)  # each child's resource options


def run_component(wait_for_state: bool = True, monkeypatch: pytest.MonkeyPatch | None = None) -> Run:
    run = Run(OperatorRecorder())
    pulumi.runtime.set_mocks(run.recorder, project="gpufleet", stack="prod-onprem", preview=False)

    def keep_options(args: pulumi.ResourceTransformationArgs) -> None:
        run.options[args.name] = args.opts

    @pulumi.runtime.test
    def evaluate() -> pulumi.Output[Any]:
        component = Metal3Hosts(
            "bm",
            Metal3HostsArgs(hosts=HOSTS, kubeconfig=KUBECONFIG, passwords=PASSWORDS, wait_for_state=wait_for_state),
            opts=pulumi.ResourceOptions(transformations=[keep_options]),
        )
        statuses = pulumi.Output.all(**{n: r.status for n, r in component.hosts.items()}).apply(run.statuses.update)
        secret = pulumi.Output.from_input(component.kubeconfig.is_secret()).apply(
            lambda is_secret: setattr(run, "kubeconfig_secret", is_secret)
        )
        return pulumi.Output.all(statuses, secret)

    if monkeypatch is not None:
        original = Metal3Hosts.register_outputs

        def register(self: Metal3Hosts, outputs: Any) -> None:
            run.registered.update(outputs)
            original(self, outputs)

        monkeypatch.setattr(Metal3Hosts, "register_outputs", register)
    evaluate()
    return run


@pytest.fixture(scope="module")
def run() -> Run:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return run_component(monkeypatch=monkeypatch)


def _plain(value: Any) -> Any:
    return rpc.unwrap_rpc_secret(value) if rpc.is_rpc_secret(value) else value


def test_one_secret_and_one_bare_metal_host_per_host_all_through_the_management_clusters_provider(run):
    rec = run.recorder
    (provider,) = rec.of_type(PROVIDER)
    assert sorted(r.inputs["metadata"]["name"] for r in rec.of_type(BMH)) == ["gpu-a01", "gpu-a02"]
    assert sorted(r.inputs["metadata"]["name"] for r in rec.of_type(SECRET)) == ["gpu-a01-bmc", "gpu-a02-bmc"]
    for r in rec.of_type(BMH) + rec.of_type(SECRET):
        assert r.provider is not None and r.provider.split("::")[-2:-1] == [provider.name], r.name
        assert r.inputs["metadata"]["namespace"] == "metal3"
    assert {r.type for r in rec.resources} == {"gpufleet:baremetal:Metal3Hosts", PROVIDER, SECRET, BMH}


def test_the_registered_bare_metal_hosts_are_the_rendered_ones_and_pass_the_crd_schema(run):
    for r in run.recorder.of_type(BMH):
        obj = {k: r.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}
        assert schema_errors(obj) == [], r.name
        rendered = metal3.bare_metal_host(next(h for h in HOSTS if h.name == obj["metadata"]["name"]))
        assert obj["spec"] == rendered["spec"]
        assert obj["metadata"]["labels"] == rendered["metadata"]["labels"]


def test_each_secret_is_valid_and_holds_its_hosts_own_password(run):
    data = {}
    for r in run.recorder.of_type(SECRET):
        obj = {k: _plain(v) for k, v in r.inputs.items()}
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
        data[obj["metadata"]["name"]] = {k: base64.b64decode(v).decode() for k, v in obj["data"].items()}
    assert data == {
        "gpu-a01-bmc": {"username": "admin", "password": PASSWORD},
        "gpu-a02-bmc": {"username": "admin", "password": PASSWORD + "-b"},
    }


def test_the_password_and_kubeconfig_reach_the_cluster_only_as_secrets(run):
    rec = run.recorder
    (provider,) = rec.of_type(PROVIDER)
    assert rpc.is_rpc_secret(provider.inputs["kubeconfig"])
    for r in rec.of_type(SECRET):
        assert rpc.is_rpc_secret(r.inputs["data"]), r.name  # given as plain strings, made secrets
    assert run.kubeconfig_secret is True
    plain = json.dumps([{k: v for k, v in r.inputs.items() if not rpc.is_rpc_secret(v)} for r in rec.resources])
    for value in (PASSWORD, base64.b64encode(PASSWORD.encode()).decode(), "kube-token-0123"):
        assert value not in plain


def test_each_hosts_state_is_read_back_from_the_operators_status_and_registered(run):
    assert run.statuses == {
        "gpu-a01": {
            "provisioning_state": "provisioned",
            "powered_on": True,
            "operational_status": "OK",
            "error_message": None,
            "serial_number": "SN-0001",
        },
        "gpu-a02": {
            "provisioning_state": "externally provisioned",
            "powered_on": False,
            "operational_status": "OK",
            "error_message": None,
            "serial_number": None,
        },
    }
    assert set(run.registered) == {"hosts"} and set(run.registered["hosts"]) == {"gpu-a01", "gpu-a02"}


def test_pulumi_up_waits_for_the_state_each_hosts_spec_leads_to(run):
    waits = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["annotations"] for r in run.recorder.of_type(BMH)}
    assert waits == {
        "gpu-a01": {WAIT_FOR_ANNOTATION: "jsonpath={.status.provisioning.state}=provisioned"},
        "gpu-a02": {WAIT_FOR_ANNOTATION: "jsonpath={.status.provisioning.state}=externally provisioned"},
    }
    unwaited = run_component(wait_for_state=False)
    assert all("annotations" not in r.inputs["metadata"] for r in unwaited.recorder.of_type(BMH))


def test_fields_metal3_will_not_change_in_place_replace_the_host_delete_first(run):
    opts = run.options["bm-gpu-a01"]
    assert set(opts.replace_on_changes or []) == {
        "spec.bmc.address",
        "spec.bootMACAddress",
        "spec.externallyProvisioned",
    }
    assert opts.delete_before_replace is True
    assert opts.custom_timeouts is not None
    assert (opts.custom_timeouts.create, opts.custom_timeouts.delete) == ("90m", "60m")
    assert [d._name for d in opts.depends_on] == ["bm-gpu-a01-bmc"]  # the Secret exists before the host


def test_a_host_without_its_password_is_refused_before_anything_is_registered():
    recorder = OperatorRecorder()
    pulumi.runtime.set_mocks(recorder, project="gpufleet", stack="prod-onprem", preview=False)
    with pytest.raises(ValueError, match="no BMC password given for gpufleet:bmc_password_b"):
        Metal3Hosts("bm", Metal3HostsArgs(hosts=HOSTS, kubeconfig=KUBECONFIG, passwords={"gpufleet:bmc_password": "x"}))
    assert recorder.resources == []


def test_passwords_are_read_once_each_from_the_stacks_secret_config():
    pulumi.runtime.set_mocks(Recorder(), project="gpufleet", stack="prod-onprem", preview=False)
    config = {"gpufleet:bmc_password": "from-config-a", "gpufleet:bmc_password_b": "from-config-b"}
    pulumi.runtime.set_all_config(config, secret_keys=list(config))
    seen: dict[str, Any] = {}

    @pulumi.runtime.test
    def evaluate() -> pulumi.Output[Any]:
        passwords = passwords_from_config([*HOSTS, HOSTS[0]])
        assert list(passwords) == ["gpufleet:bmc_password", "gpufleet:bmc_password_b"]
        values = pulumi.Output.all(**passwords).apply(seen.update)
        secret = pulumi.Output.all(*(pulumi.Output.from_input(p.is_secret()) for p in passwords.values())).apply(
            lambda flags: seen.update(secret=flags)
        )
        return pulumi.Output.all(values, secret)

    try:
        evaluate()
    finally:
        pulumi.runtime.set_all_config({}, secret_keys=[])  # leave no config behind for other tests
    assert seen == {
        "gpufleet:bmc_password": "from-config-a",
        "gpufleet:bmc_password_b": "from-config-b",
        "secret": [True, True],
    }
