"""gpufleet.baremetal.metal3: stack hosts -> Metal3 BareMetalHosts (checked against the vendored CRD's schema) and their
credentials Secrets (checked by kubernetes-validate), the BMC address formats Metal3 documents, and the problems a
host that cannot be one is refused with."""

from __future__ import annotations

import base64
import copy
import functools
import json
from types import SimpleNamespace
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from gpufleet.baremetal import metal3
from gpufleet.kube.labels import GPU_MODEL_LABEL
from tests.charts import crd_errors, crd_validator
from tests.conftest import FIXTURES

CRD = FIXTURES / "crds" / "metal3" / "metal3.io_baremetalhosts.yaml"
PASSWORD = "s3cr3t-BMC-pw"  # the tests' password: it must show up only in the Secret's data
ISO = "https://images.example.net/installer.iso"
SHA256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


@functools.cache
def _validator() -> Any:
    crd = yaml.safe_load(CRD.read_text())
    assert crd["spec"]["names"]["kind"] == metal3.KIND
    (version,) = [v for v in crd["spec"]["versions"] if f"{crd['spec']['group']}/{v['name']}" == metal3.API_VERSION]
    return crd_validator(version["schema"]["openAPIV3Schema"])


def schema_errors(obj: dict[str, Any]) -> list[str]:
    return crd_errors(_validator(), obj)


def _ns(value: Any) -> Any:
    """Stack data as attribute objects, the way the spec models hand it over."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _ns(v) for k, v in value.items()})
    return value


def stack_host(**changes: Any) -> dict[str, Any]:
    """A host of the shared stack shape (issue 22), with ``changes`` merged in (a None value removes the key)."""
    host: dict[str, Any] = {
        "name": "gpu-a01",
        "host_group": "h100",
        "bmc": {
            "address": "https://10.0.0.11",
            "username": "admin",
            "password": {"secret": "gpufleet:bmc_password"},
            "verify_tls": True,
        },
        "system_id": "1",
        "serial": "SN-0001",
        "boot": {
            "mode": "UEFI",
            "source": "virtual-media",
            "image_url": "https://images.example.net/ubuntu-24.04.qcow2",
            "image_checksum": f"sha256:{SHA256}",
        },
        "power": "on",
        "ssh": {"address": "10.0.1.11", "port": 22},
        "boot_mac": "AA:BB:CC:DD:EE:01",
        "expected": {"gpu_model": "H100-SXM5-80GB", "gpu_count": 8, "numa_nodes": 2, "memory_gib": 2048},
        "wipe_disks_on_delete": False,
    }
    for key, value in changes.items():
        if value is None:
            host.pop(key, None)
        elif isinstance(value, dict) and isinstance(host.get(key), dict):
            host[key] = {**host[key], **value}
            host[key] = {k: v for k, v in host[key].items() if v is not None}
        else:
            host[key] = value
    return host


def one(**changes: Any) -> metal3.Metal3Host:
    (host,) = metal3.hosts_from_stack([_ns(stack_host(**changes))], "metal3")
    return host


def problems(**changes: Any) -> list[str]:
    with pytest.raises(metal3.Metal3Error) as failed:
        metal3.hosts_from_stack([_ns(stack_host(**changes))], "metal3")
    return str(failed.value).splitlines()


# -- the CRD schema -----------------------------------------------------------------------------------------------

VARIANTS = {
    "virtual-media-qcow2": {},
    "virtual-media-live-iso": {"boot": {"image_url": ISO, "image_checksum": None}},
    "pxe-with-image": {"boot": {"source": "pxe"}},
    "pxe-no-image": {"boot": {"source": "pxe", "image_url": None, "image_checksum": None}},
    "disk-adopted": {"boot": {"source": "disk", "image_url": None, "image_checksum": None}},
    "http-bmc-ipv6-port": {"bmc": {"address": "http://[fd00::11]:8000"}},
    "self-signed-power-off-wipe": {"bmc": {"verify_tls": False}, "power": "off", "wipe_disks_on_delete": True},
    "root-device-hints": {"root_device_hints": {"device_name": "/dev/nvme0n1", "min_size_gigabytes": 400}},
    "no-group-no-serial": {"host_group": None, "serial": None, "expected": None},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_kind_of_host_renders_a_bare_metal_host_the_crd_schema_accepts(variant):
    bmh = metal3.bare_metal_host(one(**VARIANTS[variant]))
    assert (bmh["apiVersion"], bmh["kind"]) == ("metal3.io/v1alpha1", "BareMetalHost")
    assert schema_errors(bmh) == []


def test_the_schema_check_refuses_a_field_the_api_server_would_prune_or_a_wrong_enum():
    bmh = metal3.bare_metal_host(one())
    typo = copy.deepcopy(bmh)
    typo["spec"]["bmc"]["adress"] = typo["spec"]["bmc"].pop("address")
    assert any("adress" in e for e in schema_errors(typo))
    assert any("address" in e for e in schema_errors(typo))  # the required field is now missing too
    bad_enum = copy.deepcopy(bmh)
    bad_enum["spec"]["image"]["checksumType"] = "sha1"
    assert schema_errors(bad_enum) != []
    no_online = copy.deepcopy(bmh)
    del no_online["spec"]["online"]
    assert any("online" in e for e in schema_errors(no_online))


macs = st.lists(st.integers(0, 255), min_size=6, max_size=6).map(lambda b: ":".join(f"{x:02x}" for x in b))


@settings(max_examples=40, deadline=None)
@given(
    source=st.sampled_from(metal3.BOOT_SOURCES),
    https=st.booleans(),
    port=st.one_of(st.none(), st.integers(1, 65535)),
    system_id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True),
    mac=macs,
    power=st.sampled_from(["on", "off"]),
    wipe=st.booleans(),
    iso=st.booleans(),
    mode=st.sampled_from(metal3.BOOT_MODES),
)
def test_any_valid_stack_host_renders_a_schema_valid_host_with_a_parsable_address(
    source, https, port, system_id, mac, power, wipe, iso, mode
):
    address = f"{'https' if https else 'http'}://bmc-7.example.net" + (f":{port}" if port else "")
    image = "https://images.example.net/os" + (".iso" if iso else ".raw")
    host = one(
        bmc={"address": address},
        system_id=system_id,
        boot={"source": source, "mode": mode, "image_url": image},
        boot_mac=mac,
        power=power,
        wipe_disks_on_delete=wipe,
    )
    bmh = metal3.bare_metal_host(host)
    assert schema_errors(bmh) == []
    driver, _, rest = bmh["spec"]["bmc"]["address"].partition("://")
    assert driver == ("redfish-virtualmedia" if source == "virtual-media" else "redfish") + ("" if https else "+http")
    assert rest == "bmc-7.example.net" + (f":{port}" if port else "") + f"/redfish/v1/Systems/{system_id}"
    assert bmh["spec"]["online"] is (power == "on")
    assert bmh["spec"]["automatedCleaningMode"] == ("metadata" if wipe else "disabled")


# -- BMC address formats (book.metal3.io "Supported hardware"; baremetal-operator pkg/hardwareutils/bmc) -------------


def test_virtual_media_boot_uses_the_redfish_virtualmedia_driver_and_the_systems_path():
    host = one()
    assert host.bmc_address == "redfish-virtualmedia://10.0.0.11/redfish/v1/Systems/1"
    assert metal3.bare_metal_host(host)["spec"]["bmc"]["address"] == host.bmc_address


@pytest.mark.parametrize("source", ["pxe", "disk"])
def test_network_or_disk_boot_uses_the_redfish_driver(source):
    assert one(boot={"source": source}).bmc_address == "redfish://10.0.0.11/redfish/v1/Systems/1"


def test_a_bmc_without_tls_gets_plus_http_and_its_port_and_ipv6_brackets_are_kept():
    assert one(bmc={"address": "http://127.0.0.1:8000"}).bmc_address == (
        "redfish-virtualmedia+http://127.0.0.1:8000/redfish/v1/Systems/1"
    )
    assert one(bmc={"address": "https://[fd00::11]:8443/"}, boot={"source": "pxe"}).bmc_address == (
        "redfish://[fd00::11]:8443/redfish/v1/Systems/1"
    )


def test_system_ids_keep_dots_and_have_slashes_escaped():
    assert one(system_id="System.Embedded.1").bmc_address.endswith("/redfish/v1/Systems/System.Embedded.1")
    assert one(system_id="a/b").bmc_address.endswith("/redfish/v1/Systems/a%2Fb")


def test_certificate_verification_is_turned_off_only_for_an_https_bmc_that_asks_for_it():
    assert metal3.bare_metal_host(one(bmc={"verify_tls": False}))["spec"]["bmc"]["disableCertificateVerification"]
    assert "disableCertificateVerification" not in metal3.bare_metal_host(one())["spec"]["bmc"]
    http = one(bmc={"address": "http://10.0.0.11", "verify_tls": False})
    assert "disableCertificateVerification" not in metal3.bare_metal_host(http)["spec"]["bmc"]


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("ftp://10.0.0.11", "is not http(s)://host[:port]"),
        ("10.0.0.11", "is not http(s)://host[:port]"),
        ("https://10.0.0.11:99999", "no valid port"),
        ("https://10.0.0.11/redfish/v1/Systems/1", "system_id names the system"),
        ("https://root:calvin@10.0.0.11", "credentials do not belong"),
    ],
)
def test_a_bmc_address_that_is_not_a_redfish_service_root_is_refused(address, says):
    (line,) = problems(bmc={"address": address})
    assert line.startswith("baremetal.hosts[0].bmc.address: ") and says in line
    assert "calvin" not in line


# -- the credentials Secret ---------------------------------------------------------------------------------------


def test_the_secret_holds_base64_username_and_password_under_the_name_the_host_points_at():
    host = one()
    secret = metal3.credentials_secret(host, PASSWORD)
    assert secret["metadata"] == {"name": "gpu-a01-bmc", "namespace": "metal3", "labels": dict(host.labels)}
    assert secret["type"] == "Opaque"
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {
        "username": "admin",
        "password": PASSWORD,
    }
    assert metal3.bare_metal_host(host)["spec"]["bmc"]["credentialsName"] == secret["metadata"]["name"]
    kubernetes_validate.validate(secret, kubernetes_validate.latest_version(), strict=True)


def test_the_password_is_in_no_host_object_and_not_in_the_host_description():
    host = one()
    encoded = base64.b64encode(PASSWORD.encode()).decode()
    rendered = json.dumps(metal3.bare_metal_host(host)) + repr(host)
    assert PASSWORD not in rendered and encoded not in rendered
    assert host.password_key == "gpufleet:bmc_password"  # where the program reads it from, as a Pulumi secret


def test_a_plain_text_password_is_refused_without_repeating_it():
    (line,) = problems(bmc={"password": PASSWORD})
    assert line.startswith("baremetal.hosts[0].bmc.password: ") and "secret reference" in line
    assert PASSWORD not in line


# -- boot, image, power, cleaning ---------------------------------------------------------------------------------


def test_a_disk_image_is_written_with_its_checksum_and_the_host_ends_provisioned():
    host = one()
    assert metal3.bare_metal_host(host)["spec"]["image"] == {
        "url": "https://images.example.net/ubuntu-24.04.qcow2",
        "checksum": SHA256,
        "checksumType": "sha256",
    }
    assert host.target_state == "provisioned"


def test_an_iso_is_booted_live_without_a_checksum():
    host = one(boot={"image_url": ISO, "image_checksum": None})
    assert metal3.bare_metal_host(host)["spec"]["image"] == {"url": ISO, "format": "live-iso"}


def test_a_checksum_file_url_is_passed_on_for_ironic_to_detect_its_type():
    url = "https://images.example.net/SHA256SUMS"
    image = metal3.bare_metal_host(one(boot={"image_checksum": url}))["spec"]["image"]
    assert (image["checksum"], image["checksumType"]) == (url, "auto")


@pytest.mark.parametrize(
    ("checksum", "says"),
    [
        (None, "needs a checksum"),
        ("sha256:abc", "64 hex digits"),
        ("crc32:abcd1234", "is not <md5|sha256|sha512>:<hex digest>"),
        (SHA256, "is not <md5|sha256|sha512>:<hex digest>"),
    ],
)
def test_a_disk_image_without_a_usable_checksum_is_refused(checksum, says):
    (line,) = problems(boot={"image_checksum": checksum})
    assert line.startswith("baremetal.hosts[0].boot.image_checksum: ") and says in line


def test_virtual_media_without_an_image_is_refused():
    (line,) = problems(boot={"image_url": None, "image_checksum": None})
    assert line.startswith("baremetal.hosts[0].boot.image_url: ")


def test_booting_from_disk_adopts_the_host_as_externally_provisioned():
    host = one(boot={"source": "disk", "image_url": None, "image_checksum": None})
    spec = metal3.bare_metal_host(host)["spec"]
    assert spec["externallyProvisioned"] is True and "image" not in spec
    assert host.target_state == "externally provisioned"


def test_network_boot_needs_the_boot_mac_and_virtual_media_does_not():
    (line,) = problems(boot={"source": "pxe"}, boot_mac=None)
    assert line.startswith("baremetal.hosts[0].boot_mac: ") and "redfish://" in line
    assert "bootMACAddress" not in metal3.bare_metal_host(one(boot_mac=None))["spec"]
    assert metal3.bare_metal_host(one())["spec"]["bootMACAddress"] == "aa:bb:cc:dd:ee:01"
    (bad,) = problems(boot_mac="aa:bb:cc:dd:ee")
    assert bad.startswith("baremetal.hosts[0].boot_mac: ")


def test_power_off_is_online_false_and_such_a_host_is_not_provisioned():
    host = one(power="off")
    assert metal3.bare_metal_host(host)["spec"]["online"] is False
    assert host.target_state == "available"
    assert metal3.bare_metal_host(one())["spec"]["online"] is True
    (line,) = problems(power="standby")
    assert line.startswith("baremetal.hosts[0].power: ")


def test_wiping_disks_on_delete_is_metal3s_metadata_cleaning():
    assert metal3.bare_metal_host(one(wipe_disks_on_delete=True))["spec"]["automatedCleaningMode"] == "metadata"
    assert metal3.bare_metal_host(one())["spec"]["automatedCleaningMode"] == "disabled"


def test_boot_mode_and_root_device_hints_are_passed_on():
    host = one(boot={"mode": "UEFISecureBoot"}, root_device_hints={"device_name": "/dev/nvme0n1", "rotational": False})
    spec = metal3.bare_metal_host(host)["spec"]
    assert spec["bootMode"] == "UEFISecureBoot"
    assert spec["rootDeviceHints"] == {"deviceName": "/dev/nvme0n1", "rotational": False}
    (line,) = problems(boot={"mode": "BIOS"})
    assert line.startswith("baremetal.hosts[0].boot.mode: ")


def test_the_host_group_and_gpu_model_label_the_host():
    labels = metal3.bare_metal_host(one())["metadata"]["labels"]
    assert labels == {metal3.HOST_GROUP_LABEL: "h100", GPU_MODEL_LABEL: "H100-SXM5-80GB"}
    assert "serial SN-0001" in metal3.bare_metal_host(one())["spec"]["description"]


# -- problems -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"name": "GPU_A01"}, "name"),
        ({"name": "0b2c6a8e-3f1d-4c9a-9a55-6c1f6a1e0d11"}, "name"),
        ({"system_id": None}, "system_id"),
        ({"bmc": {"username": None}}, "bmc.username"),
        ({"boot": {"source": "usb"}}, "boot.source"),
    ],
)
def test_a_host_metal3_cannot_manage_is_refused_at_its_path(changes, path):
    (line,) = problems(**changes)
    assert line.startswith(f"baremetal.hosts[0].{path}: ")


def test_every_problem_of_every_host_is_reported_with_the_hosts_index():
    hosts = [_ns(stack_host()), _ns(stack_host(name="gpu-a02", system_id=None, boot_mac="nope"))]
    with pytest.raises(metal3.Metal3Error) as failed:
        metal3.hosts_from_stack(hosts, "Not A Namespace")
    assert [str(p).split(":")[0] for p in failed.value.problems] == [
        "baremetal.metal3.namespace",
        "baremetal.hosts[1].system_id",
        "baremetal.hosts[1].boot_mac",
    ]
    assert metal3.host_problems(_ns(stack_host()), "metal3") == []
    assert [p.path for p in metal3.host_problems(hosts[1], "metal3")] == [("system_id",), ("boot_mac",)]


# The stack shape of issue 22 as a stack file holds it, read as stack files are (YAML 1.2: `power: on` is a string)
STACK_BAREMETAL = """
gpufleet:baremetal:
  engine: metal3
  metal3: {namespace: metal3, kubeconfig: {secret: gpufleet:mgmt_kubeconfig}}
  hosts:
    - name: gpu-a01
      host_group: h100
      bmc:
        address: https://10.0.0.11
        username: admin
        password: {secret: gpufleet:bmc_password}
        verify_tls: true
      system_id: "1"
      serial: "SN-0001"
      boot: {mode: UEFI, source: virtual-media, image_url: https://images.example.net/os.qcow2,
             image_checksum: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
      power: on
      ssh: {address: 10.0.1.11, port: 22}
      boot_mac: "aa:bb:cc:dd:ee:ff"
      expected: {gpu_model: H100-SXM5-80GB, gpu_count: 8, numa_nodes: 2, memory_gib: 2048}
      wipe_disks_on_delete: false
"""


def test_the_stack_shape_read_from_a_stack_file_maps_to_a_schema_valid_host():
    baremetal = YAML(typ="safe", pure=True).load(STACK_BAREMETAL)["gpufleet:baremetal"]
    (host,) = metal3.hosts_from_stack(baremetal["hosts"], baremetal["metal3"]["namespace"])
    bmh = metal3.bare_metal_host(host)
    assert schema_errors(bmh) == []
    assert bmh["spec"]["bmc"]["address"] == "redfish-virtualmedia://10.0.0.11/redfish/v1/Systems/1"
    assert bmh["spec"]["online"] is True
    assert host.password_key == "gpufleet:bmc_password"


def test_mappings_and_attribute_objects_give_the_same_host():
    assert metal3.hosts_from_stack([stack_host()], "metal3") == metal3.hosts_from_stack([_ns(stack_host())], "metal3")


# -- reading the operator's status back ---------------------------------------------------------------------------


def test_host_status_reads_state_power_and_the_serial_inspection_found():
    status = {
        "errorCount": 0,
        "errorMessage": "",
        "operationalStatus": "OK",
        "poweredOn": True,
        "provisioning": {"ID": "8799e0d2", "state": "provisioned", "bootMode": "UEFI", "image": {"url": "x"}},
        "hardware": {"systemVendor": {"manufacturer": "Supermicro", "serialNumber": "SN-0001"}},
    }
    assert metal3.host_status(status) == metal3.HostStatus(
        provisioning_state="provisioned", powered_on=True, operational_status="OK", serial_number="SN-0001"
    )
    assert metal3.host_status(None) == metal3.HostStatus()
    assert metal3.host_status({"provisioning": {"state": ""}}).provisioning_state is None
