"""The bare-metal provider's CRUD (infra/baremetal/provider.py) and its Redfish layer (gpufleet/baremetal/bmc.py)
against a real Redfish service: one sushy-emulator per module with its fake driver (sushy-tools' in-memory systems),
HTTP basic auth from a bcrypt htpasswd file as the lab sets it up, on 127.0.0.1.

The fake driver applies a power change 1 to 11 s (random) after the request; the emulator here runs with the
delay's random draw at its lower bound (a change lands within a second), so the module stays fast. Everything
else is sushy-tools as shipped. Each test uses a fake system of its own (tests may run on different workers).
"""

from __future__ import annotations

import http.server
import json
import logging
import secrets
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import requests
from pulumi.dynamic import Config, ConfigureRequest

from gpufleet.baremetal.bmc import (
    Bmc,
    BmcError,
    BootOverride,
    Endpoint,
    ExpectedHardware,
    HostFacts,
    Inventory,
    PcieDevice,
    PcieFunction,
    Processor,
    SshTarget,
    facts_script,
    hardware_differences,
    parse_address,
    run_facts_script,
    wait_for_ssh,
)
from infra.baremetal.provider import BareMetalHostProvider, BootSpec, HostInputs, SshSpec, Timeouts
from tests.conftest import FIXTURES
from tests.sushy import USER, free_port, htpasswd, running

CONFIG_KEY = "gpufleet:bmc_password"
# one fake system per scenario: uuid, initial power state
SYSTEMS = {
    "create": ("a0000000-0000-4000-8000-000000000001", "Off"),
    "diff": ("a0000000-0000-4000-8000-000000000002", "Off"),
    "update": ("a0000000-0000-4000-8000-000000000003", "On"),
    "delete": ("a0000000-0000-4000-8000-000000000004", "On"),
    "drift": ("a0000000-0000-4000-8000-000000000005", "On"),
    "vmedia": ("a0000000-0000-4000-8000-000000000006", "Off"),
    "wipe": ("a0000000-0000-4000-8000-000000000007", "On"),
    "errors": ("a0000000-0000-4000-8000-000000000008", "Off"),
    "force": ("a0000000-0000-4000-8000-000000000009", "On"),
    # tests/unit/baremetal/test_bmc_faults.py: behind a fault-injecting proxy
    "faults-500": ("a0000000-0000-4000-8000-000000000010", "Off"),
    "faults-503": ("a0000000-0000-4000-8000-000000000011", "Off"),
    "faults-reset": ("a0000000-0000-4000-8000-000000000012", "Off"),
    "faults-hang": ("a0000000-0000-4000-8000-000000000013", "Off"),
    "faults-crud": ("a0000000-0000-4000-8000-000000000014", "Off"),
}
BOOT_MAC = "52:54:00:aa:00:01"
DRIVE = "32ADF365C6C1B7BD"
FAST = Timeouts(power_s=20, graceful_off_s=5, ssh_s=5, facts_s=60, wipe_s=10, bmc_retry_s=0, poll_s=0.2)


def _config(tmp: Path, port: int, password: str) -> Path:
    auth = htpasswd(tmp / "htpasswd", password)
    systems = [
        {"uuid": uuid, "name": f"fake-{name}", "power_state": power, "nics": [{"mac": BOOT_MAC, "ip": "192.0.2.1"}]}
        for name, (uuid, power) in SYSTEMS.items()
    ]
    wipe = SYSTEMS["wipe"][0]
    storage = {
        wipe: [
            {
                "Id": "1",
                "Name": "Local Storage Controller",
                "StorageControllers": [{"MemberId": "0", "Name": "RAID", "SpeedGbps": 12}],
                "Drives": [DRIVE],
            }
        ]
    }
    drives = {(wipe, "1"): [{"Id": DRIVE, "Name": "Drive Sample", "CapacityBytes": 899527000000, "Protocol": "SAS"}]}
    config = tmp / "sushy.conf"
    config.write_text(
        f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(auth)!r}\n"
        f"SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(tmp / 'state')!r}\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n"
        f"SUSHY_EMULATOR_STORAGE = {storage!r}\n"
        f"SUSHY_EMULATOR_DRIVES = {drives!r}\n"
    )
    return config


@dataclass(frozen=True)
class Emulator:
    url: str
    password: str
    log: Path
    image_url: str  # an image the emulator can download into its virtual CD
    ssh_port: int  # a listener that greets like sshd
    silent_port: int  # a listener that accepts and says nothing


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def _listener(banner: bytes) -> tuple[socket.socket, threading.Thread]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                if banner:
                    conn.sendall(banner)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    tmp = tmp_path_factory.mktemp("sushy")
    port, password = free_port(), secrets.token_urlsafe(16)
    config = _config(tmp, port, password)
    (tmp / "images").mkdir()
    (tmp / "images" / "installer.iso").write_bytes(b"not really an ISO\n")
    images = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: _Quiet(*a, directory=str(tmp / "images")))
    threading.Thread(target=images.serve_forever, daemon=True).start()
    ssh, _ = _listener(b"SSH-2.0-OpenSSH_9.2 fake\r\n")
    silent, _ = _listener(b"")
    log = tmp / "emulator.log"
    url = f"http://127.0.0.1:{port}"
    try:
        with running(config, url, log):
            yield Emulator(
                url,
                password,
                log,
                f"http://127.0.0.1:{images.server_address[1]}/installer.iso",
                ssh.getsockname()[1],
                silent.getsockname()[1],
            )
    finally:
        images.shutdown()
        images.server_close()
        ssh.close()
        silent.close()


def host(emu: Emulator, system: str, **changes: Any) -> HostInputs:
    base = HostInputs(
        name=f"gpu-{system}",
        host_group="h100",
        bmc_address=emu.url,
        bmc_username=USER,
        bmc_password_key=CONFIG_KEY,
        system_id=SYSTEMS[system][0],
        ssh=SshSpec("127.0.0.1", emu.ssh_port),
        boot_mac=BOOT_MAC,
        timeouts=FAST,
    )
    return replace(base, **changes)


def provider(emu: Emulator, lines: list[str] | None = None, configured: bool = True) -> BareMetalHostProvider:
    """A provider as the Pulumi engine sets one up: configured with the stack's config (the password's key)."""
    p = BareMetalHostProvider(progress=(lines.append if lines is not None else lambda _: None))
    if configured:
        p.configure(ConfigureRequest(Config({CONFIG_KEY: emu.password}, "gpufleet")))
    return p


def props(emu: Emulator, inputs: HostInputs) -> dict[str, Any]:
    """The property bag the engine hands create/update: the inputs with the (unwrapped) secret password."""
    return inputs.to_props() | {"password": emu.password}


def bmc(emu: Emulator, password: str | None = None) -> Bmc:
    return Bmc(Endpoint(emu.url, USER, password or emu.password), poll_seconds=0.2)


def redfish(emu: Emulator, path: str) -> dict[str, Any]:
    """A Redfish resource as the BMC serves it (plain HTTP, not through gpufleet)."""
    answer = requests.get(emu.url + path, auth=(USER, emu.password), timeout=10)
    answer.raise_for_status()
    return answer.json()


def power_of(emu: Emulator, system: str) -> str:
    return redfish(emu, f"/redfish/v1/Systems/{SYSTEMS[system][0]}")["PowerState"]


# -- create, diff, update, read, delete -----------------------------------------------------------------------
def test_create_powers_an_off_system_on_once_from_disk_waits_for_ssh_and_outputs_its_facts(
    emulator: Emulator, caplog: pytest.LogCaptureFixture
):
    lines: list[str] = []
    caplog.set_level(logging.DEBUG)
    assert power_of(emulator, "create") == "Off"
    result = provider(emulator, lines).create(props(emulator, host(emulator, "create")))
    assert power_of(emulator, "create") == "On"
    system = redfish(emulator, f"/redfish/v1/Systems/{SYSTEMS['create'][0]}")
    assert system["Boot"]["BootSourceOverrideTarget"] == "Hdd" and system["Boot"]["BootSourceOverrideMode"] == "UEFI"
    outs = result.outs
    assert result.id == f"{emulator.url}/redfish/v1/Systems/{SYSTEMS['create'][0]}" == outs["system_path"]
    assert outs["power"] == "on" and outs["resolved_system_id"] == SYSTEMS["create"][0]
    assert outs["facts"]["macs"] == [BOOT_MAC] and outs["facts"]["manufacturer"] == "Sushy Emulator"
    assert outs["observed"]["boot_override"]["allowed_targets"] == ["Pxe", "Cd", "Hdd", "UefiHttp"]
    assert any("SSH answers on 127.0.0.1" in line for line in lines)
    everything = json.dumps(outs) + result.id + "\n".join(lines) + caplog.text
    assert "password" not in outs and emulator.password not in everything


def test_the_same_inputs_again_are_no_change_and_only_identity_changes_replace(emulator: Emulator):
    inputs = host(emulator, "diff", power="off")
    p = provider(emulator)
    outs = p.create(props(emulator, inputs)).outs
    assert power_of(emulator, "diff") == "Off"
    news = props(emulator, inputs)
    same = p.diff(outs["system_path"], outs, news)
    assert same.changes is False and same.replaces == []
    powered = p.diff(outs["system_path"], outs, props(emulator, replace(inputs, power="on")))
    assert powered.changes is True and powered.replaces == []
    other_box = p.diff(outs["system_path"], outs, props(emulator, replace(inputs, serial="SN-9")))
    more_gpus = p.diff(
        outs["system_path"], outs, props(emulator, replace(inputs, expected=ExpectedHardware(gpu_count=8)))
    )
    assert other_box.replaces == ["serial"] and more_gpus.replaces == ["expected"]
    assert other_box.delete_before_replace is True


def test_a_password_that_arrives_marked_secret_is_used_unwrapped(emulator: Emulator):
    from pulumi.runtime import rpc

    bag = host(emulator, "errors", power="off").to_props() | {"password": rpc.wrap_rpc_secret(emulator.password)}
    outs = provider(emulator, configured=False).create(bag).outs
    assert outs["power"] == "off" and power_of(emulator, "errors") == "Off"


def test_update_to_power_off_shuts_the_host_down(emulator: Emulator):
    p, inputs = provider(emulator), host(emulator, "update")
    outs = p.create(props(emulator, inputs)).outs
    assert outs["power"] == "on"
    off = replace(inputs, power="off")
    assert p.diff(outs["system_path"], outs, props(emulator, off)).changes is True
    updated = p.update(outs["system_path"], outs, props(emulator, off)).outs
    assert updated["power"] == "off" and power_of(emulator, "update") == "Off"
    assert p.diff(outs["system_path"], updated, props(emulator, off)).changes is False


def test_read_shows_a_host_powered_off_behind_the_providers_back(emulator: Emulator):
    p, inputs = provider(emulator), host(emulator, "drift")
    outs = p.create(props(emulator, inputs)).outs
    with bmc(emulator) as direct:
        direct.reset(SYSTEMS["drift"][0], "ForceOff")
        direct.wait_power(SYSTEMS["drift"][0], "Off", 20)
    state = {k: v for k, v in outs.items() if k != "password"}  # read gets the outputs: no password there
    refreshed = p.read(outs["system_path"], state)
    assert refreshed.id == outs["system_path"] and refreshed.outs["power"] == "off"
    assert refreshed.outs["observed"]["power_state"] == "Off"
    drift = p.diff(outs["system_path"], refreshed.outs, props(emulator, inputs))
    assert drift.changes is True and drift.replaces == []


def test_delete_powers_off_with_the_password_from_the_stack_config(emulator: Emulator):
    lines: list[str] = []
    p, inputs = provider(emulator, lines), host(emulator, "delete")
    outs = p.create(props(emulator, inputs)).outs
    assert "password" not in outs
    p.delete(outs["system_path"], outs)
    assert power_of(emulator, "delete") == "Off"
    assert any("GracefulShutdown" in line for line in lines)
    unconfigured = provider(emulator, configured=False)
    with pytest.raises(BmcError, match=r"^gpu-delete: no BMC password: .*no 'gpufleet:bmc_password'$"):
        unconfigured.delete(outs["system_path"], outs)


def test_virtual_media_is_inserted_before_power_on_and_ejected_on_delete(emulator: Emulator):
    sid = SYSTEMS["vmedia"][0]
    boot = BootSpec(source="virtual-media", image_url=emulator.image_url, image_checksum="sha256:" + "0" * 64)
    p, inputs = provider(emulator), host(emulator, "vmedia", boot=boot)
    outs = p.create(props(emulator, inputs)).outs
    cd = redfish(emulator, f"/redfish/v1/Systems/{sid}/VirtualMedia/Cd")
    assert cd["Inserted"] is True and cd["Image"] == emulator.image_url
    assert redfish(emulator, f"/redfish/v1/Systems/{sid}")["Boot"]["BootSourceOverrideTarget"] == "Cd"
    assert outs["observed"]["virtual_media"] == [
        {"id": "Cd", "media_types": ["CD", "DVD"], "image": emulator.image_url, "inserted": True}
    ]
    p.delete(outs["system_path"], outs)
    cd = redfish(emulator, f"/redfish/v1/Systems/{sid}/VirtualMedia/Cd")
    assert cd["Inserted"] is False and not cd["Image"] and power_of(emulator, "vmedia") == "Off"


def test_a_disk_wipe_the_bmc_cannot_do_is_refused_before_anything_changes(emulator: Emulator):
    p, inputs = provider(emulator), host(emulator, "wipe", wipe_disks_on_delete=True)
    outs = p.create(props(emulator, inputs)).outs
    with pytest.raises(BmcError) as err:
        p.delete(outs["system_path"], outs)
    assert err.value.kind == "unsupported"
    assert str(err.value) == (
        f"gpu-wipe: cannot wipe the disks of system {SYSTEMS['wipe'][0]} through Redfish: drive 1/{DRIVE} offers no"
        " Drive.SecureErase (wipe them another way, e.g. Ironic cleaning, or set wipe_disks_on_delete: false)"
    )
    assert power_of(emulator, "wipe") == "On"


def test_a_host_still_on_after_the_graceful_timeout_is_forced_off(emulator: Emulator):
    lines: list[str] = []
    with bmc(emulator) as b:
        how = b.power_off(SYSTEMS["force"][0], graceful_timeout=0, timeout=20, progress=lines.append)
        assert b.power_off(SYSTEMS["force"][0], graceful_timeout=0, timeout=20) == "already off"
    assert how == "forced" and power_of(emulator, "force") == "Off"
    sid = SYSTEMS["force"][0]
    assert lines[0] == f"system {sid}: reset GracefulShutdown (ForceOff after 0 s)"
    assert f"system {sid}: reset ForceOff" in lines[1:]


def test_the_boot_mode_is_sent_only_when_the_system_reports_another(emulator: Emulator):
    sid = SYSTEMS["force"][0]
    with bmc(emulator) as b:
        assert b.set_boot_override(sid, "Hdd", "UEFI") is None  # the fake reports UEFI already
        assert b.set_boot_override(sid, "Pxe", "Legacy") == "Legacy"
    boot = redfish(emulator, f"/redfish/v1/Systems/{sid}")["Boot"]
    assert (boot["BootSourceOverrideTarget"], boot["BootSourceOverrideMode"]) == ("Pxe", "Legacy")


# -- errors: one line each, never the password -----------------------------------------------------------------
def test_a_wrong_password_is_one_line_naming_the_user_never_the_password(
    emulator: Emulator, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG)
    wrong = "Wr0ng-" + secrets.token_urlsafe(12)
    bag = host(emulator, "errors").to_props() | {"password": wrong}
    with pytest.raises(BmcError) as err:
        provider(emulator).create(bag)
    message = str(err.value)
    assert err.value.kind == "auth" and "\n" not in message
    assert message == (
        f"gpu-errors: BMC {emulator.url} refused user 'admin' logging in (HTTP 401: wrong user name or password)"
    )
    for secret in (wrong, emulator.password):
        assert secret not in message + caplog.text + emulator.log.read_text()
    assert power_of(emulator, "errors") == "Off"


def test_a_wrong_serial_is_refused_saying_what_the_system_reports(emulator: Emulator):
    p = provider(emulator)
    with pytest.raises(BmcError) as err:
        p.create(props(emulator, host(emulator, "errors", serial="SN-0001")))
    assert err.value.kind == "mismatch"
    assert str(err.value) == (
        f"gpu-errors: system {SYSTEMS['errors'][0]} at {emulator.url} reports no SerialNumber;"
        " expected serial 'SN-0001'"
    )
    with pytest.raises(BmcError, match=r"no system with serial 'SN-0001' at .* \(a0000000-.*: no serial"):
        p.create(props(emulator, host(emulator, "errors", system_id=None, serial="SN-0001")))
    assert power_of(emulator, "errors") == "Off"


def test_another_boot_nic_is_a_wrong_box(emulator: Emulator):
    with pytest.raises(BmcError) as err:
        provider(emulator).create(props(emulator, host(emulator, "errors", boot_mac="52:54:00:aa:00:99")))
    assert err.value.kind == "mismatch"
    assert str(err.value).endswith(
        f"is not the box described: no NIC with MAC 52:54:00:aa:00:99 (NICs: {BOOT_MAC}); nothing was changed"
    )


def test_an_unknown_system_id_lists_the_systems_there_are(emulator: Emulator):
    with pytest.raises(BmcError) as err:
        provider(emulator).create(props(emulator, host(emulator, "errors", system_id="nope")))
    assert err.value.kind == "not-found"
    assert str(err.value).startswith(f"gpu-errors: BMC {emulator.url} has no system 'nope' (its systems: a0000000-")


def test_a_reset_or_boot_target_the_system_does_not_allow_lists_the_allowed_values(emulator: Emulator):
    sid = SYSTEMS["errors"][0]
    with bmc(emulator) as b, pytest.raises(BmcError) as err:
        b.reset(sid, "PowerCycle")
    assert err.value.kind == "unsupported"
    assert str(err.value) == (
        f"system {sid} at {emulator.url} does not allow reset 'PowerCycle'; allowed: On, ForceOff,"
        " GracefulShutdown, GracefulRestart, ForceRestart, Nmi, ForceOn"
    )
    with bmc(emulator) as b, pytest.raises(BmcError) as err:
        b.set_boot_override(sid, "Usb")
    assert str(err.value) == (
        f"system {sid} at {emulator.url} cannot boot 'Usb' (BootSourceOverrideTarget allows: Pxe, Cd, Hdd, UefiHttp)"
    )


def test_an_unreachable_bmc_is_one_line():
    port = free_port()  # nothing listens there
    with Bmc(Endpoint(f"http://127.0.0.1:{port}", USER, "secret-pw")) as b, pytest.raises(BmcError) as err:
        b.system_ids()
    assert err.value.kind == "unreachable"
    assert str(err.value) == f"BMC http://127.0.0.1:{port} unreachable (connection refused)"
    assert "secret-pw" not in repr(b.endpoint) + repr(err.value)


def test_the_inventory_reads_power_boot_nics_and_virtual_media(emulator: Emulator):
    with bmc(emulator) as b:
        inv = b.inventory(SYSTEMS["errors"][0])
    assert (inv.power, inv.serial, inv.macs) == ("Off", None, (BOOT_MAC,))
    assert inv.boot.mode == "UEFI" and "Pxe" in inv.boot.allowed_targets
    assert [(m.id, m.media_types) for m in inv.virtual_media] == [
        ("Cd", ("CD", "DVD")),
        ("Floppy", ("Floppy", "USBStick")),
    ]
    assert inv.processors is None and inv.pcie_devices is None and inv.memory_gib is None  # the fake lists none


# -- input checks ------------------------------------------------------------------------------------------------
def test_check_names_each_unusable_input():
    bad = HostInputs(
        name="gpu-x",
        host_group="h100",
        bmc_address="https://admin:pw@10.0.0.11",
        bmc_username=USER,
        boot=BootSpec(source="virtual-media", image_checksum="sha1:abc"),
        power="standby",
        boot_mac="aa:bb",
    )
    failures = BareMetalHostProvider().check({}, bad.to_props()).failures
    assert [(f.property, f.reason) for f in failures] == [
        ("bmc_address", "BMC address: credentials do not belong in the URL (give username and password)"),
        ("system_id", "give the Redfish system id, the serial number, or both"),
        ("power", "'standby': one of on, off"),
        ("boot.image_url", "virtual-media needs the image's http(s) URL"),
        ("boot.image_checksum", "sha256:<64 hex digits> (or sha512:, md5:)"),
        ("boot_mac", "'aa:bb' is not a MAC address (aa:bb:cc:dd:ee:ff)"),
    ]


def test_inputs_survive_the_property_bag_where_numbers_come_back_as_floats():
    inputs = HostInputs(
        "gpu-a01", "h100", "https://10.0.0.11", USER, CONFIG_KEY, system_id="1",
        ssh=SshSpec("10.0.1.11", 2222), expected=ExpectedHardware("H100-SXM5-80GB", 8, 2, 2048),
    )  # fmt: skip
    bag = json.loads(json.dumps(inputs.to_props()).replace("2222", "2222.0").replace(": 8,", ": 8.0,"))
    assert HostInputs.from_props(bag) == inputs


def test_bmc_addresses_are_a_base_url_or_refused():
    assert parse_address("10.0.0.11") == "https://10.0.0.11"
    assert parse_address("http://bmc-a01:8000/redfish/v1/") == "http://bmc-a01:8000"
    for bad, why in (("ftp://x", "scheme"), ("https://x/api", "not a path"), ("https://x:99999", "Port")):
        with pytest.raises(BmcError, match=why):
            parse_address(bad)


# -- SSH and host facts ------------------------------------------------------------------------------------------
def test_ssh_is_up_when_the_port_greets_like_sshd_not_when_it_only_accepts(emulator: Emulator):
    assert wait_for_ssh("127.0.0.1", emulator.ssh_port, timeout=2, interval=0.1) < 1
    lines: list[str] = []
    with pytest.raises(BmcError) as err:
        wait_for_ssh("127.0.0.1", emulator.silent_port, timeout=0.5, progress=lines.append, interval=0.1)
    assert err.value.kind == "timeout" and str(err.value) == f"no SSH on 127.0.0.1:{emulator.silent_port} after 0 s"
    assert lines and lines[0].startswith(f"waiting for SSH on 127.0.0.1:{emulator.silent_port}")


def test_host_facts_are_what_hostfacts_reads_on_the_host(catalog):
    """The facts script run by a python3 reading its stdin (ssh runs ``python3 -`` on the host) gives what
    gpufleet.host.hostfacts reads in-process on the same machine."""
    from gpufleet.host.hostfacts import parse_cpulist, read_host

    ran = run_facts_script([sys.executable, "-"], facts_script(catalog.gpus_by_pci_id), timeout=60)
    assert HostFacts.from_hostfacts(ran) == HostFacts.from_hostfacts(read_host("/", catalog.gpus_by_pci_id))
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    assert HostFacts.from_hostfacts(ran).cpus == len(online)


def test_the_ssh_command_uses_the_key_only_and_runs_the_remote_command():
    target = SshTarget("10.0.1.11", 2222, "ubuntu", "/keys/id_ed25519")
    argv = target.command("python3 -")
    assert argv[0] == "ssh" and argv[-2:] == ["ubuntu@10.0.1.11", "python3 -"]
    assert {"BatchMode=yes", "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"} <= set(argv)
    assert argv[argv.index("-i") + 1] == "/keys/id_ed25519" and argv[argv.index("-p") + 1] == "2222"
    pinned = SshTarget("10.0.1.11", known_hosts_file="/etc/gpufleet/known_hosts", private_key_path="/k").command("true")
    assert "StrictHostKeyChecking=yes" in pinned and "UserKnownHostsFile=/etc/gpufleet/known_hosts" in pinned


# -- is it the box we were told about? ---------------------------------------------------------------------------
def _inventory(processors=None, pcie=None, memory: float | None = None) -> Inventory:
    return Inventory(
        "1", "/redfish/v1/Systems/1", None, "SN-1", "Dell Inc.", "PowerEdge XE9680", "Off", 2, memory,
        processors, pcie, (), BootOverride(None, None, None, ()), ("On",), (),
    )  # fmt: skip


def _lookup(catalog):
    return lambda ident: (g.name if (g := catalog.find_gpu(ident)) else None) if ident else None


def test_the_bmc_gpu_list_and_memory_are_held_to_the_expected_hardware(catalog):
    expected = ExpectedHardware("H100-SXM5-80GB", 8, 2, 2048)
    four = tuple(Processor(f"GPU{i}", "GPU", "NVIDIA H100 80GB HBM3", "NVIDIA", None, None) for i in range(4))
    diffs, unverified = hardware_differences(expected, _lookup(catalog), inv=_inventory(four, memory=1024))
    assert diffs == ["4 GPUs (expected 8)", "1024 GiB of memory (expected 2048 GiB)"]
    assert unverified == ["NUMA nodes: Redfish does not report them and no host facts were read"]
    a100 = PcieFunction("10de", "20b2", "030200")  # A100-SXM4-80GB
    h100 = PcieFunction("10de", "2330", "030200")
    nvswitch = PcieFunction("10de", "22a3", "068000")  # a bridge: not a GPU
    devices = tuple(PcieDevice(str(i), None, "NVIDIA", None, (h100,)) for i in range(7))
    devices += (PcieDevice("7", None, "NVIDIA", None, (a100,)), PcieDevice("8", None, "NVIDIA", None, (nvswitch,)))
    diffs, _ = hardware_differences(expected, _lookup(catalog), inv=_inventory(pcie=devices, memory=2040))
    assert diffs == ["GPU model A100-SXM4-80GB (expected H100-SXM5-80GB)"]  # 2040 GiB: within the BMC's rounding
    diffs, unverified = hardware_differences(expected, _lookup(catalog), inv=_inventory())
    assert diffs == [] and unverified[0] == "GPUs: the BMC lists none and no host facts were read"


def test_the_running_hosts_facts_are_held_to_the_expected_hardware(catalog):
    from gpufleet.host.hostfacts import read_host

    facts = HostFacts.from_hostfacts(read_host(str(FIXTURES / "hosts" / "dgx-h100"), catalog.gpus_by_pci_id))
    assert (facts.numa_nodes, len(facts.gpus), facts.cpus) == (2, 8, 224)
    right = ExpectedHardware("NVIDIA H100 80GB HBM3", 8, 2, 2048)
    assert hardware_differences(right, _lookup(catalog), facts=facts) == ([], [])
    wrong = ExpectedHardware("H200-SXM-141GB", 4, 4, 4096)
    diffs, _ = hardware_differences(wrong, _lookup(catalog), facts=facts)
    assert diffs == [
        "8 GPUs (expected 4)",
        "GPU model H100-SXM5-80GB (expected H200-SXM-141GB)",
        f"{facts.memory_gib:g} GiB of memory seen by the OS (expected 4096 GiB installed)",
        "2 NUMA nodes (expected 4)",
    ]


# -- the resource as the Pulumi engine sees it ---------------------------------------------------------------------
def test_the_password_reaches_the_engine_as_a_secret_and_the_serialized_provider_holds_none():
    import base64

    import pulumi
    from pulumi.runtime import rpc

    from infra.baremetal.provider import BareMetalHost

    registered: dict[str, dict[str, Any]] = {}

    class Record(pulumi.runtime.Mocks):
        def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
            registered[args.typ] = dict(args.inputs)
            return f"id-{args.name}", dict(args.inputs)

        def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
            return {}

    password = "Pw-" + secrets.token_urlsafe(12)
    pulumi.runtime.set_mocks(Record(), project="gpufleet", stack="lab-local", preview=False)
    seen: dict[str, Any] = {}

    def keep(values: list[Any]) -> None:
        seen.update(secret=values[0], key=values[1])

    @pulumi.runtime.test
    def evaluate() -> pulumi.Output[Any]:
        inputs = HostInputs("gpu-a01", "h100", "https://10.0.0.11", USER, CONFIG_KEY, system_id="1")
        resource = BareMetalHost("gpu-a01", inputs, password=password)
        return pulumi.Output.all(resource.password.is_secret(), resource.bmc_password_key).apply(keep)

    evaluate()
    bag = registered["pulumi-python:dynamic/gpufleet:BareMetalHost"]
    assert seen == {"secret": True, "key": CONFIG_KEY}
    # the engine gets the password wrapped as a secret (Pulumi's signature key and its secret signature)
    assert bag["password"] == {rpc._special_sig_key: rpc._special_secret_sig, "value": password}
    provider_blob = bag["__provider"]["value"] if isinstance(bag["__provider"], dict) else bag["__provider"]
    assert password.encode() not in base64.b64decode(provider_blob)
