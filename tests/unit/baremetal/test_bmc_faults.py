"""A BMC that fails or hangs while the bare-metal provider creates, updates or deletes a host: a real fault-injecting
HTTP proxy (tests/fault_proxy.py) in front of the sushy-emulator answers 500 or 503, resets the connection, or hangs
mid-response on the request a test names. The operation fails within its timeout with one line naming the host and
the step, the provider's state stays re-runnable, and a re-run reaches the same end state with no duplicate side
effect: the emulator's own log counts the power changes and media inserts that reached it (docs/reliability.md)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from gpufleet.baremetal.bmc import BmcError
from infra.baremetal.provider import BootSpec, Timeouts
from tests.fault_proxy import FaultProxy, fault_proxy
from tests.unit.baremetal.test_bmc_provider import (  # noqa: F401  (emulator: the fixture)
    SYSTEMS,
    Emulator,
    emulator,
    host,
    power_of,
    props,
    provider,
    redfish,
)

RESET = r"/Actions/ComputerSystem\.Reset$"
INSERT = r"/VirtualMedia/Cd/Actions/VirtualMedia\.InsertMedia$"
EJECT = r"/VirtualMedia/Cd/Actions/VirtualMedia\.EjectMedia$"
SYSTEM = r"/redfish/v1/Systems/[0-9a-f-]+$"
READ_S = 3.0  # how long the provider waits for a BMC's answer here (a hung response)
TIMEOUTS = Timeouts(power_s=20, graceful_off_s=5, ssh_s=5, facts_s=60, bmc_retry_s=0, poll_s=0.2, bmc_read_s=READ_S)


@pytest.fixture
def proxy(emulator: Emulator) -> Iterator[FaultProxy]:  # noqa: F811
    with fault_proxy(emulator.url) as p:
        yield p


def through(emu: Emulator, proxy: FaultProxy, system: str, **changes: object):  # type: ignore[no-untyped-def]
    """The host's inputs with its BMC behind the proxy."""
    return host(emu, system, bmc_address=proxy.url, timeouts=TIMEOUTS, **changes)


def emulator_posts(emu: Emulator, system: str, path: str) -> int:
    """POSTs to the system's ``path`` the emulator logged (what reached the BMC)."""
    sid = SYSTEMS[system][0]
    return len(re.findall(rf"POST /redfish/v1/Systems/{sid}{path.rstrip('$')} HTTP", emu.log.read_text()))


def one_line(exc: BaseException, host_name: str, step: str) -> str:
    text = str(exc)
    assert "\n" not in text and text.startswith(f"{host_name}: ") and step in text, text
    return text


@pytest.mark.parametrize("fault", ["500", "503", "reset"])
def test_create_fails_on_a_failing_reset_and_a_re_run_powers_on_once(
    emulator: Emulator,  # noqa: F811
    proxy: FaultProxy,
    fault: str,
):
    system = {"500": "faults-500", "503": "faults-503", "reset": "faults-reset"}[fault]
    inputs = through(emulator, proxy, system)
    proxy.fault("POST", RESET, fault)  # type: ignore[arg-type]
    started = time.monotonic()
    with pytest.raises(BmcError) as err:
        provider(emulator).create(props(emulator, inputs))
    assert time.monotonic() - started < 30
    one_line(err.value, inputs.name, "reset")
    assert power_of(emulator, system) == "Off" and emulator_posts(emulator, system, RESET) == 0
    outs = provider(emulator).create(props(emulator, inputs)).outs  # the engine runs create again
    assert outs["power"] == "on" and power_of(emulator, system) == "On"
    assert emulator_posts(emulator, system, RESET) == 1


def test_create_fails_within_its_read_timeout_on_a_bmc_that_hangs_mid_response(
    emulator: Emulator,  # noqa: F811
    proxy: FaultProxy,
):
    inputs = through(emulator, proxy, "faults-hang")
    proxy.fault("GET", SYSTEM, "hang")
    started = time.monotonic()
    with pytest.raises(BmcError) as err:
        provider(emulator).create(props(emulator, inputs))
    assert time.monotonic() - started < READ_S * 4
    one_line(err.value, inputs.name, "")
    assert power_of(emulator, "faults-hang") == "Off"
    assert provider(emulator).create(props(emulator, inputs)).outs["power"] == "on"
    assert emulator_posts(emulator, "faults-hang", RESET) == 1


def test_update_and_delete_fail_on_a_failing_bmc_and_re_run_to_the_same_end(
    emulator: Emulator,  # noqa: F811
    proxy: FaultProxy,
):
    boot = BootSpec(source="virtual-media", image_url=emulator.image_url, image_checksum="sha256:" + "0" * 64)
    inputs = through(emulator, proxy, "faults-crud", boot=boot)
    p = provider(emulator)
    outs = p.create(props(emulator, inputs)).outs
    assert emulator_posts(emulator, "faults-crud", INSERT) == 1
    off = replace(inputs, power="off")
    proxy.fault("POST", RESET, "503")
    with pytest.raises(BmcError) as err:
        p.update(outs["system_path"], outs, props(emulator, off))
    one_line(err.value, inputs.name, "reset")
    assert power_of(emulator, "faults-crud") == "On"
    updated = p.update(outs["system_path"], outs, props(emulator, off)).outs
    assert updated["power"] == "off" and power_of(emulator, "faults-crud") == "Off"
    proxy.fault("POST", EJECT, "reset")
    with pytest.raises(BmcError) as err:
        p.delete(updated["system_path"], updated)
    one_line(err.value, inputs.name, "")
    p.delete(updated["system_path"], updated)
    cd = redfish(emulator, f"/redfish/v1/Systems/{SYSTEMS['faults-crud'][0]}/VirtualMedia/Cd")
    assert cd["Inserted"] is False and emulator_posts(emulator, "faults-crud", INSERT) == 1
    assert emulator_posts(emulator, "faults-crud", EJECT) == 1
