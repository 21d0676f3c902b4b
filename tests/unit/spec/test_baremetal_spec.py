"""Bare-metal hosts in a stack (gpufleet:baremetal.hosts, engine redfish|metal3) and `gpufleet inventory`.

The invalid fixtures tests/fixtures/invalid/baremetal_*.yaml are checked by test_spec_invalid.py; here: the example
stack, each structural rule at its key, the cross-host rules, secrets never shown, and the inventory (from the stack
file, and from the lab's inventory file, read by the real ansible-inventory and ansible-playbook --syntax-check).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.baremetal.inventory import InventoryError, inventory_from_document, stack_inventory
from gpufleet.cli import app
from gpufleet.spec.load import dump_stack, load_stack, load_stack_text
from tests.conftest import REPO, TODAY
from tests.stacks import release_block

EXAMPLE = REPO / "examples/baremetal/Pulumi.prod-onprem.yaml"
SECURE = "v1:RVhBTVBMRQ==:cmVwbGFjZSBtZSB3aXRoIHB1bHVtaSBjb25maWcgc2V0IC0tc2VjcmV0"
BIN = Path(sys.executable).parent
PASSWORD = "calvin-in-plain-text"  # what a user might paste; it must never come back out
VIRTUAL_MEDIA = "{source: virtual-media, image_url: https://i.example/x.iso, image_checksum: 'sha256:" + "c" * 64 + "'}"
METAL3 = "    engine: metal3\n    metal3: {namespace: metal3, kubeconfig: {secret: gpufleet:bmc_password}}\n"


def stack_text(hosts: str, *, groups: str = "", extra: str = "", baremetal: str = "") -> str:
    """A bare-metal stack with one H100 host group (and ``groups``), the secret gpufleet:bmc_password, ``hosts``
    (YAML list items indented for hosts:) and ``baremetal`` keys."""
    return f"""config:
  gpufleet:stage: prod
  gpufleet:region: onprem
{release_block()}  gpufleet:bmc_password:
    secure: {SECURE}
{extra}  gpufleet:baremetal:
    inventory: inventories/prod-onprem
{baremetal}    host_groups:
      - name: h100
        gpu_model: H100-SXM5-80GB
        gpus_per_host: 8
      - name: cpu
{groups}    hosts:
{hosts}"""


def host(name: str = "gpu-a01", *, fields: str = "", bmc: str = "https://10.0.0.11", ssh: str = "10.0.1.11") -> str:
    """One host entry; ``fields`` are further keys (each line indented 8 spaces), replacing defaults they name."""
    defaults = {"host_group": "h100", "system_id": '"1"', "ssh": f"{{address: {ssh}}}"}
    given = {line.strip().split(":", 1)[0] for line in fields.splitlines() if line.strip()}
    lines = [f"        {k}: {v}" for k, v in defaults.items() if k not in given]
    credentials = "username: gpufleet, password: {secret: gpufleet:bmc_password}"
    text = f"      - name: {name}\n        bmc: {{address: {bmc}, {credentials}}}\n"
    return text + "\n".join(lines) + "\n" + fields


def errors(text: str) -> list[tuple[str, str]]:
    result = load_stack_text(text, "stack.yaml", today=TODAY)
    return [(d.path, d.message) for d in result.diagnostics]


def only_error(text: str) -> tuple[str, str]:
    found = errors(text)
    assert len(found) == 1, found
    return found[0]


# -- the example and the shape --------------------------------------------------------------------------------


def test_example_onprem_stack_is_valid_and_round_trips_with_its_secret():
    result = load_stack(EXAMPLE, today=TODAY)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    bm = result.stack.baremetal
    assert [h.name for h in bm.hosts] == ["gpu-a01", "gpu-a02", "gpu-b01"]
    assert bm.engine == "redfish" and bm.metal3 is None
    assert result.secret_keys == {"gpufleet:bmc_password"}
    assert {h.bmc.password.secret for h in bm.hosts} == {"gpufleet:bmc_password"}
    assert bm.hosts[0].bmc.password.namespace == "gpufleet" and bm.hosts[0].bmc.password.name == "bmc_password"
    again = load_stack_text(dump_stack(result.stack, {"gpufleet:bmc_password": SECURE}), EXAMPLE.name, today=TODAY)
    assert again.ok, again.diagnostics
    assert again.stack == result.stack
    # without the secret the references dangle: the round trip needs it
    bare = load_stack_text(dump_stack(result.stack), EXAMPLE.name, today=TODAY)
    assert {d.path for d in bare.diagnostics} == {f"baremetal.hosts[{i}].bmc.password.secret" for i in range(3)}


def test_example_validates_with_engine_metal3_and_its_settings():
    text = EXAMPLE.read_text()
    engine = "    engine: metal3\n    metal3: {namespace: metal3, kubeconfig: {secret: gpufleet:mgmt_kubeconfig}}\n"
    metal3 = text.replace("    host_groups:\n", engine + "    host_groups:\n", 1).replace(
        "  gpufleet:baremetal:\n", f"  gpufleet:mgmt_kubeconfig:\n    secure: {SECURE}\n  gpufleet:baremetal:\n", 1
    )
    result = load_stack_text(metal3, EXAMPLE.name, today=TODAY)
    assert result.ok, "\n".join(map(str, result.diagnostics))
    assert result.stack.baremetal.engine == "metal3"
    assert result.stack.baremetal.metal3.kubeconfig.secret == "gpufleet:mgmt_kubeconfig"
    # the kubeconfig is a secret of the stack too
    no_secret = metal3.replace("  gpufleet:mgmt_kubeconfig:\n", "  gpufleet:mgmt_kubeconfig_old:\n")
    assert [d.path for d in load_stack_text(no_secret, EXAMPLE.name, today=TODAY).diagnostics] == [
        "baremetal.metal3.kubeconfig.secret"
    ]


def test_metal3_settings_go_with_engine_metal3_only_and_are_required_then():
    ready = host(fields=f"        boot: {VIRTUAL_MEDIA}\n")  # what engine metal3 needs of a host
    assert only_error(stack_text(ready, baremetal="    engine: metal3\n")) == (
        "baremetal.metal3",
        "engine metal3 needs metal3: {namespace: ..., kubeconfig: {secret: KEY}}",
    )
    settings = "    metal3: {namespace: metal3, kubeconfig: {secret: gpufleet:bmc_password}}\n"
    path, message = only_error(stack_text(ready, baremetal=settings))
    assert path == "baremetal.metal3" and "only with engine: metal3" in message
    path, message = only_error(
        stack_text(
            ready, baremetal="    engine: metal3\n    metal3: {namespace: metal3, kubeconfig: KUBECONFIG-TEXT}\n"
        )
    )
    assert path == "baremetal.metal3.kubeconfig" and "kubeconfig is a Pulumi secret" in message
    assert "KUBECONFIG-TEXT" not in message
    assert errors(stack_text(ready, baremetal=METAL3)) == []


def test_hosts_are_optional_and_the_default_engine_is_redfish():
    text = stack_text("").replace("    hosts:\n", "")
    result = load_stack_text(text, "stack.yaml", today=TODAY)
    assert result.ok, result.diagnostics
    assert result.stack.baremetal.hosts == [] and result.stack.baremetal.engine == "redfish"


def test_converge_needs_hosts_to_converge():
    text = stack_text("", baremetal="    converge: true\n").replace("    hosts:\n", "")
    path, message = only_error(text)
    assert path == "baremetal.converge" and "list them in hosts" in message
    assert load_stack_text(stack_text(host(), baremetal="    converge: true\n"), "s.yaml", today=TODAY).ok


# -- secrets --------------------------------------------------------------------------------------------------


def test_a_plain_text_password_is_refused_without_repeating_it():
    text = stack_text(host().replace("password: {secret: gpufleet:bmc_password}", f"password: {PASSWORD}"))
    path, message = only_error(text)
    assert path == "baremetal.hosts[0].bmc.password"
    assert message.startswith("BMC passwords are Pulumi secrets: run `pulumi config set --secret KEY ...`")
    assert PASSWORD not in message


@pytest.mark.parametrize("value", [PASSWORD, "12345"], ids=["text", "number"])
def test_a_password_written_where_the_key_goes_is_not_echoed(value: str):
    text = stack_text(host().replace("{secret: gpufleet:bmc_password}", f"{{secret: {value}}}"))
    path, message = only_error(text)
    assert path == "baremetal.hosts[0].bmc.password.secret" and "namespace:name" in message
    assert value not in message


def test_the_validate_json_never_holds_the_password(tmp_path: Path):
    stack = tmp_path / "stack.yaml"
    stack.write_text(stack_text(host().replace("{secret: gpufleet:bmc_password}", PASSWORD)))
    result = CliRunner().invoke(app, ["validate", "--json", str(stack)])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report[0]["errors"][0]["path"] == "baremetal.hosts[0].bmc.password"
    assert PASSWORD not in result.output


def test_a_secure_entry_is_the_ciphertext_alone():
    text = stack_text(host()).replace(f"    secure: {SECURE}\n", '    secure: ""\n')
    found = errors(text)
    assert (
        "gpufleet:bmc_password",
        "a secret is `secure: <ciphertext>` alone, as `pulumi config set --secret` writes it",
    ) in found
    assert ("baremetal.hosts[0].bmc.password.secret", found[-1][1]) in found  # and the reference dangles


def test_a_secret_of_another_namespace_counts():
    text = stack_text(
        host().replace("gpufleet:bmc_password}", "rack:bmc}"), extra=f"  rack:bmc:\n    secure: {SECURE}\n"
    )
    assert errors(text) == []


# -- one host: structure --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "fragment"),
    [
        ("ftp://10.0.0.11", "is not an https:// or http:// address"),
        ("10.0.0.11", "is not an https:// or http:// address"),
        ("https://10.0.0.11/redfish/v1", "scheme, host and port only"),
        ("https://10.0.0.256", "names no host"),
        ("https://10.0.0.11:99999", "no valid port"),
        ("https://bad_host", "names no host"),
    ],
)
def test_bmc_address_is_scheme_host_and_port(address: str, fragment: str):
    path, message = only_error(stack_text(host(bmc=address)))
    assert path == "baremetal.hosts[0].bmc.address" and fragment in message


def test_credentials_in_the_bmc_address_are_refused_and_not_shown():
    path, message = only_error(stack_text(host(bmc=f"https://root:{PASSWORD}@10.0.0.11")))
    assert path == "baremetal.hosts[0].bmc.address" and "credentials do not go in the BMC address" in message
    assert PASSWORD not in message


@pytest.mark.parametrize(
    "address", ["http://127.0.0.1:8000", "https://bmc-a01.example.net:8443/", "'https://[fd00::11]'"]
)
def test_bmc_addresses_that_are_valid(address: str):
    assert errors(stack_text(host(bmc=address))) == []


def test_a_host_is_identified_by_system_id_or_serial():
    text = stack_text(host().replace('        system_id: "1"\n', ""))
    assert only_error(text) == (
        "baremetal.hosts[0]",
        "give system_id (the Redfish ComputerSystem id) or serial (its SerialNumber), or both",
    )
    assert errors(stack_text(host(fields="        serial: SN-1\n").replace('        system_id: "1"\n', ""))) == []


def test_serial_and_system_id_written_as_numbers_are_refused_with_the_reason():
    path, message = only_error(stack_text(host(fields="        serial: 0123\n")))
    assert path == "baremetal.hosts[0].serial" and "write the serial number as a quoted string" in message
    path, message = only_error(stack_text(host(fields="        system_id: 1\n")))
    assert path == "baremetal.hosts[0].system_id" and "quoted string" in message


@pytest.mark.parametrize(
    ("boot", "path", "fragment"),
    [
        ("{source: virtual-media}", "baremetal.hosts[0].boot", "source virtual-media needs image_url"),
        ("{source: disk, image_url: https://i.example/x.iso}", "baremetal.hosts[0].boot", "source disk boots"),
        (
            "{source: virtual-media, image_url: https://i.example/x.iso, image_checksum: md5:0123}",
            "baremetal.hosts[0].boot.image_checksum",
            "'sha256:' and 64 lowercase hex digits",
        ),
        ("{source: pxe, image_checksum: 'sha256:" + "a" * 64 + "'}", "baremetal.hosts[0].boot", "needs image_url"),
        ("{mode: Legacy}", "baremetal.hosts[0].boot.mode", "'Legacy' is not valid"),
        ("{source: usb}", "baremetal.hosts[0].boot.source", "'usb' is not valid"),
    ],
)
def test_boot_source_rules(boot: str, path: str, fragment: str):
    found = only_error(stack_text(host(fields=f"        boot: {boot}\n")))
    assert found[0] == path and fragment in found[1], found


def test_virtual_media_with_image_and_checksum_is_valid():
    boot = "{source: virtual-media, image_url: https://i.example/x.iso, image_checksum: 'sha512:" + "0" * 128 + "'}"
    assert errors(stack_text(host(fields=f"        boot: {boot}\n"))) == []


@pytest.mark.parametrize(
    ("mac", "fragment"), [("aa:bb:cc:dd:ee", "is not a MAC address"), ("01:00:5e:00:00:01", "multicast")]
)
def test_boot_mac_format(mac: str, fragment: str):
    path, message = only_error(stack_text(host(fields=f'        boot_mac: "{mac}"\n')))
    assert path == "baremetal.hosts[0].boot_mac" and fragment in message


def test_power_accepts_on_off_also_as_yaml_booleans():
    for written, power in (("on", "on"), ("off", "off"), ("true", "on"), ("false", "off")):
        result = load_stack_text(stack_text(host(fields=f"        power: {written}\n")), "s.yaml", today=TODAY)
        assert result.ok and result.stack.baremetal.hosts[0].power == power, result.diagnostics
    assert only_error(stack_text(host(fields="        power: cycle\n")))[0] == "baremetal.hosts[0].power"


def test_gpu_count_needs_gpu_model_and_host_names_are_dns_labels():
    assert only_error(stack_text(host(fields="        expected: {gpu_count: 8}\n"))) == (
        "baremetal.hosts[0].expected",
        "gpu_count needs gpu_model (which GPUs to count)",
    )
    assert only_error(stack_text(host("GPU_A01")))[0] == "baremetal.hosts[0].name"


# -- across hosts, the groups and the catalog ------------------------------------------------------------------


def test_hosts_share_no_name_bmc_system_mac_or_ssh_endpoint():
    hosts = (
        host("gpu-a01", fields='        boot_mac: "02:00:00:00:00:01"\n')
        + host("gpu-a01", bmc="https://10.0.0.12", ssh="10.0.1.12")
        + host("gpu-a03", bmc="https://10.0.0.11:443/", ssh="10.0.1.13")  # the first BMC, written differently
        + host("gpu-a04", bmc="https://10.0.0.14", ssh="10.0.1.14", fields='        boot_mac: "02:00:00:00:00:01"\n')
        + host("gpu-a05", bmc="https://10.0.0.15", ssh="10.0.1.11")
    )
    assert errors(stack_text(hosts)) == [
        ("baremetal.hosts[1].name", "host 'gpu-a01' is listed twice; host names are unique per stack"),
        (
            "baremetal.hosts[2].system_id",
            "host 'gpu-a01' has the same system '1' of the BMC at https://10.0.0.11:443: each host is a system of"
            " its own",
        ),
        (
            "baremetal.hosts[3].boot_mac",
            "host 'gpu-a01' has the same boot_mac 02:00:00:00:00:01: a MAC address names one NIC",
        ),
        (
            "baremetal.hosts[4].ssh",
            "host 'gpu-a01' has the same SSH endpoint 10.0.1.11:22: Ansible would converge one machine twice",
        ),
    ]


def test_one_bmc_may_serve_several_systems():
    hosts = host("gpu-a01") + host("gpu-a02", ssh="10.0.1.12", fields='        system_id: "2"\n')
    assert errors(stack_text(hosts)) == []


def test_expected_gpu_is_the_host_groups_model_by_any_of_its_names():
    same = host(fields="        expected: {gpu_model: NVIDIA H100 80GB HBM3, gpu_count: 8}\n")
    assert errors(stack_text(same)) == []
    path, message = only_error(stack_text(host(fields="        expected: {gpu_model: L40S}\n")))
    assert path == "baremetal.hosts[0].expected.gpu_model"
    assert message.startswith("L40S differs from host group 'h100''s gpu_model H100-SXM5-80GB")
    assert only_error(stack_text(host(fields="        expected: {gpu_model: H100-SXM5-80GB, gpu_count: 4}\n"))) == (
        "baremetal.hosts[0].expected.gpu_count",
        "4 differs from host group 'h100''s gpus_per_host 8",
    )
    no_gpu = host(fields="        host_group: cpu\n        expected: {gpu_model: L40S}\n")
    path, message = only_error(stack_text(no_gpu))
    assert path == "baremetal.hosts[0].expected.gpu_model" and "has no gpu_model" in message


def test_amd_shaped_unknown_gpu_gets_an_amd_hint():
    path, message = only_error(
        stack_text(host(fields="        host_group: cpu\n        expected: {gpu_model: MI300}\n"))
    )
    assert path == "baremetal.hosts[0].expected.gpu_model"
    assert "did you mean 'MI300X'" in message and "H100" not in message


def test_host_rules_still_run_when_another_section_is_broken():
    text = stack_text(host() + host("gpu-a02", bmc="https://10.0.0.12", ssh="10.0.1.12", fields="        serial: X\n"))
    text = text.replace("host_group: h100\n        system_id", "host_group: h10\n        system_id", 1)
    broken = text.replace('    kubernetes: "1.36"\n', "    kubernetes: 1.36\n")
    found = errors(broken)
    assert [p for p, _ in found] == ["release.kubernetes", "baremetal.hosts[0].host_group"]


# -- engines --------------------------------------------------------------------------------------------------


def test_engine_metal3_needs_system_id_image_checksum_and_pxe_mac():
    disk = host(fields="        serial: SN-1\n").replace('        system_id: "1"\n', "")
    assert errors(stack_text(disk, baremetal=METAL3)) == [
        (
            "baremetal.hosts[0].boot",
            "engine metal3 provisions the host with an image: use source pxe (redfish://) or virtual-media"
            " (redfish-virtualmedia://) with image_url and image_checksum",
        ),
        (
            "baremetal.hosts[0].system_id",
            "engine metal3 needs system_id: Metal3's BMC address names the system"
            " (redfish://host/redfish/v1/Systems/<system_id>); a serial alone cannot be addressed",
        ),
    ]
    pxe = host(fields="        boot: {source: pxe}\n")
    assert {p for p, _ in errors(stack_text(pxe, baremetal=METAL3))} == {
        "baremetal.hosts[0].boot.image_url",
        "baremetal.hosts[0].boot.image_checksum",
        "baremetal.hosts[0].boot_mac",
    }
    full = (
        "        boot: {source: pxe, image_url: https://i.example/x.qcow2, image_checksum: 'sha256:" + "b" * 64 + "'}\n"
    )
    assert errors(stack_text(host(fields=full + '        boot_mac: "02:00:00:00:00:01"\n'), baremetal=METAL3)) == []
    # the same pxe host with engine redfish: the image comes from the network boot server
    path, message = only_error(stack_text(host(fields=full)))
    assert path == "baremetal.hosts[0].boot.image_url" and "engine redfish and source pxe" in message


# -- gpufleet inventory -----------------------------------------------------------------------------------------


def test_inventory_of_the_stack_hosts_groups_them_with_their_ssh_endpoints():
    inv = stack_inventory(load_stack(EXAMPLE, today=TODAY).stack)
    assert inv.to_dict() == {
        "all": {
            "children": {
                "h100": {
                    "hosts": {
                        "gpu-a01": {"ansible_host": "10.0.1.11", "ansible_port": 22},
                        "gpu-a02": {"ansible_host": "10.0.1.12", "ansible_port": 22},
                    }
                },
                "l40s": {"hosts": {"gpu-b01": {"ansible_host": "10.0.1.21", "ansible_port": 22}}},
                # the example's GPU VM host groups, whose servers it does not list
                "h100vm": {},
                "l40svgpu": {},
            }
        }
    }


def test_inventory_cli_writes_the_file_and_json_holds_no_secret(tmp_path: Path):
    target = tmp_path / "inventories" / "prod-onprem" / "hosts.yml"
    result = CliRunner().invoke(app, ["inventory", str(EXAMPLE), "-o", str(target), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["stack"] == "prod-onprem" and report["source"] == "stack" and report["file"] == str(target)
    assert [(h["name"], h["group"], h["ansible_port"]) for h in report["hosts"]] == [
        ("gpu-a01", "h100", 22),
        ("gpu-a02", "h100", 22),
        ("gpu-b01", "l40s", 22),
    ]
    written = target.read_text()
    assert written.startswith("# Written by `gpufleet inventory")
    for leaked in (SECURE, "bmc_password", "10.0.0.11", "secure"):
        assert leaked not in written and leaked not in result.stdout
    # without -o, the same YAML on stdout
    plain = CliRunner().invoke(app, ["inventory", str(EXAMPLE)])
    assert plain.exit_code == 0 and plain.stdout == written


@pytest.fixture
def lab_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with the lab-local stack and the inventory the lab's own writer (gpufleet lab up) leaves."""
    from gpufleet.lab import UpResult, virt, write_inventory
    from gpufleet.lab.accel import Accel
    from gpufleet.lab.config import host_uuid

    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path / "cache"))
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", "Pulumi.lab-local.yaml"):
        (project / name).write_text((REPO / name).read_text())
    hosts = [virt.LabHost(f"lab-{i}", host_uuid(f"lab-{i}"), 22220 + i, Path(), Path()) for i in (1, 2)]
    result = UpResult(Accel("tcg", "test"), "libvirt", "http://127.0.0.1:8000", None, hosts, False, 0.0)
    write_inventory(project / "inventories/lab-local/hosts.yml", hosts, result)
    return project


def test_inventory_of_lab_local_comes_from_the_lab_inventory_and_ansible_reads_it(lab_project: Path, tmp_path: Path):
    target = tmp_path / "lab-hosts.yml"
    result = CliRunner().invoke(app, ["inventory", "lab-local", "-o", str(target), "--root", str(lab_project)])
    assert result.exit_code == 0, result.output
    assert "2 host(s) from " in result.stdout and "hosts.yml (lab: lab-1, lab-2)" in result.stdout
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"}
    listed = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(target), "--list"],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert sorted(data["lab"]["hosts"]) == ["lab-1", "lab-2"]
    lab1 = data["_meta"]["hostvars"]["lab-1"]
    assert (lab1["ansible_host"], lab1["ansible_port"], lab1["ansible_user"]) == ("127.0.0.1", 22221, "root")
    assert lab1["ansible_ssh_private_key_file"].endswith("id_ed25519") and lab1["ansible_timeout"] == 120
    syntax = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(target), "ansible/site.yml"],
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    assert syntax.returncode == 0, syntax.stdout + syntax.stderr


def test_inventory_of_lab_local_before_lab_up_says_what_writes_it(lab_project: Path):
    (lab_project / "inventories/lab-local/hosts.yml").unlink()
    result = CliRunner().invoke(app, ["inventory", "lab-local", "--root", str(lab_project)])
    assert result.exit_code == 1
    assert "inventories/lab-local/hosts.yml does not exist (gpufleet lab up writes it)" in " ".join(
        result.stderr.split()
    )
    assert "Traceback" not in result.output


def test_inventory_refuses_an_inventory_file_with_a_password(lab_project: Path):
    path = lab_project / "inventories/lab-local/hosts.yml"
    path.write_text(
        path.read_text().replace("ansible_user: root", f"ansible_user: root\n          ansible_password: {PASSWORD}", 1)
    )
    result = CliRunner().invoke(app, ["inventory", "lab-local", "--root", str(lab_project)])
    assert result.exit_code == 1
    assert "ansible_password holds a secret in plain text" in " ".join(result.stderr.split())
    assert PASSWORD not in result.output


def test_inventory_of_an_aks_stack_exits_1():
    result = CliRunner().invoke(app, ["inventory", "prod-westeurope", "--root", str(REPO)])
    assert result.exit_code == 1 and "has no bare-metal hosts" in result.stderr


def test_inventory_document_rules():
    doc = {"all": {"children": {"lab": {"hosts": {"a": {"ansible_port": 2201}}}, "gpu": {"hosts": {"a": None}}}}}
    with pytest.raises(InventoryError, match="host a is in groups lab and gpu"):
        inventory_from_document(doc, "h.yml")
    with pytest.raises(InventoryError, match="groups inside groups"):
        inventory_from_document({"all": {"children": {"lab": {"children": {"x": {}}}}}}, "h.yml")
    with pytest.raises(InventoryError, match="is not a TCP port"):
        inventory_from_document({"lab": {"hosts": {"a": {"ansible_port": "ssh"}}}}, "h.yml")
    inv = inventory_from_document({"lab": {"hosts": {"a": None}}}, "h.yml", host_groups=["h100", "lab"])
    assert inv.groups == ("h100", "lab") and inv.hosts[0].ansible_host == "a"
    assert inv.to_dict() == {"all": {"children": {"h100": {}, "lab": {"hosts": {"a": {"ansible_host": "a"}}}}}}


def test_plan_lists_each_bmc_managed_host_under_its_group():
    result = CliRunner().invoke(app, ["plan", str(REPO / "examples/baremetal/Pulumi.prod-onprem.yaml")])
    assert result.exit_code == 0, result.output
    assert "3 BMC-managed host(s), engine redfish" in result.output
    assert "host gpu-b01: BMC https://10.0.0.21 (system 1, serial SN-B01-0001), boot virtual-media, power on" in (
        result.output
    )
    assert result.output.index("host gpu-b01") > result.output.index("l40s")  # under its host group
