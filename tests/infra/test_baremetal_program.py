"""The Pulumi program on a bare-metal stack (examples/baremetal/Pulumi.prod-onprem.yaml) under mocks: one
BareMetalHost per stack host (engine redfish) or Metal3 objects (engine metal3), the BMC password only as a secret,
and the hosts' Ansible inventory as an output equal to what ``gpufleet inventory`` writes from the stack file."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pulumi

from gpufleet.baremetal.inventory import stack_inventory
from gpufleet.spec.load import load_stack
from tests.conftest import REPO

EXAMPLE = REPO / "examples/baremetal/Pulumi.prod-onprem.yaml"
DYNAMIC = "pulumi-python:dynamic/gpufleet:BareMetalHost"
PASSWORD = "bmc-pass-0123"  # a test value: it must appear in no registered input but the secret one
KUBECONFIG = "apiVersion: v1\nkind: Config\nusers: [{name: admin, user: {token: kube-token-0123}}]\n"
METAL3 = "    engine: metal3\n    metal3: {namespace: metal3, kubeconfig: {secret: gpufleet:mgmt_kubeconfig}}\n"
SECURE = "  gpufleet:mgmt_kubeconfig:\n    secure: v1:RVhBTVBMRQ==:cmVwbGFjZSBtZQ==\n"


class Recorder(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[tuple[str, str, dict[str, Any]]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.resources.append((args.typ, args.name, dict(args.inputs)))
        return f"id-{args.name}", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


def run(root: Path) -> tuple[Recorder, Any, dict[str, Any]]:
    from infra.program import main

    recorder = Recorder()
    pulumi.runtime.set_mocks(recorder, project="gpufleet", stack="prod-onprem", preview=False)
    config = {"gpufleet:bmc_password": PASSWORD, "gpufleet:mgmt_kubeconfig": KUBECONFIG}
    pulumi.runtime.set_all_config(config, secret_keys=list(config))
    seen: dict[str, Any] = {}
    holder: dict[str, Any] = {}
    try:

        @pulumi.runtime.test
        def evaluate() -> pulumi.Output[Any]:
            program = main("prod-onprem", root)
            holder["program"] = program
            secrets = [h.password.is_secret() for h in program.hosts]  # type: ignore[attr-defined]
            ids = [h.id for h in program.hosts]
            return pulumi.Output.all(*secrets, *ids).apply(lambda v: seen.update(secret=v[: len(secrets)]))

        evaluate()
    finally:
        pulumi.runtime.set_all_config({}, secret_keys=[])
    return recorder, holder["program"], seen


def stack_root(tmp_path: Path, metal3: bool = False) -> Path:
    text = EXAMPLE.read_text()
    if metal3:
        text = text.replace("  gpufleet:baremetal:\n", SECURE + "  gpufleet:baremetal:\n", 1)
        text = text.replace("    hosts:\n", METAL3 + "    hosts:\n", 1)
    (tmp_path / EXAMPLE.name).write_text(text)
    return tmp_path


def test_engine_redfish_creates_one_bare_metal_host_per_stack_host_with_the_password_secret(tmp_path: Path):
    recorder, program, seen = run(stack_root(tmp_path))
    stack = load_stack(EXAMPLE).stack
    # the mocks record registrations as the engine's calls arrive, in no fixed order: one host each, by name
    hosts = {name: inputs for kind, name, inputs in recorder.resources if kind == DYNAMIC}
    assert sorted(hosts) == sorted(h.name for h in stack.baremetal.hosts)
    assert len(hosts) == len([r for r in recorder.resources if r[0] == DYNAMIC])
    assert seen["secret"] == [True] * len(hosts)
    first = hosts[stack.baremetal.hosts[0].name]
    assert first["bmc_address"] == "https://10.0.0.11" and first["serial"] == "SN-A01-0001"
    assert first["bmc_password_key"] == "gpufleet:bmc_password"
    assert first["expected"]["gpu_model"] == "H100-SXM5-80GB" and first["expected"]["gpu_count"] == 8
    for _, _, inputs in recorder.resources:  # the password only in the secret input, nowhere else
        assert PASSWORD not in repr({k: v for k, v in inputs.items() if k not in ("password", "__provider")})
        blob = inputs.get("__provider")
        blob = blob["value"] if isinstance(blob, dict) else blob
        assert blob is None or PASSWORD.encode() not in base64.b64decode(blob)  # the pickled provider
    assert program.cluster is None and program.metal3 is None


def test_engine_metal3_creates_the_metal3_objects_and_no_dynamic_hosts(tmp_path: Path):
    recorder, program, _ = run(stack_root(tmp_path, metal3=True))
    types = [t for t, _, _ in recorder.resources]
    assert DYNAMIC not in types
    assert types.count("kubernetes:metal3.io/v1alpha1:BareMetalHost") == 3
    assert types.count("kubernetes:core/v1:Secret") == 3
    assert program.hosts == [] and program.metal3 is not None


def test_the_inventory_output_is_gpufleet_inventorys(tmp_path: Path):
    from infra.program import build_baremetal  # noqa: F401 - the program exports what stack_inventory writes

    exported: dict[str, Any] = {}
    real_export = pulumi.export
    try:
        pulumi.export = lambda name, value: exported.__setitem__(name, value)  # type: ignore[assignment]
        run(stack_root(tmp_path))
    finally:
        pulumi.export = real_export  # type: ignore[assignment]
    assert exported["inventory"] == stack_inventory(load_stack(EXAMPLE).stack).to_dict()


def test_converge_is_opt_in_and_runs_site_yml_on_the_created_hosts_after_them(tmp_path: Path):
    recorder, program, _ = run(stack_root(tmp_path))
    assert program.converge is None and not [r for r in recorder.resources if r[0] == "command:local:Command"]
    root = stack_root(tmp_path)
    path = root / EXAMPLE.name
    path.write_text(path.read_text().replace("    hosts:\n", "    converge: true\n    hosts:\n", 1))
    recorder, program, _ = run(root)
    (command,) = [r for r in recorder.resources if r[0] == "command:local:Command"]
    create = command[2]["create"]
    assert " -m gpufleet inventory prod-onprem -o build/inventories/prod-onprem/hosts.yml && " in create
    assert create.endswith(
        "ansible/site.yml -i build/inventories/prod-onprem/hosts.yml --limit gpu-a01,gpu-a02,gpu-b01"
        " -e gpufleet_stack=prod-onprem"
    )
    assert command[2]["dir"] == str(REPO)
    pins = load_stack(EXAMPLE).stack.release.model_dump(exclude_none=True)
    assert command[2]["triggers"][0] == pins  # the pins: a new release
