"""Which QEMU events make the lab's reset daemon start a domain again (gpufleet/lab/resetd.py).

The events are QEMU's QMP ``SHUTDOWN`` as libvirt passes them on; the details below were recorded from the lab's
QEMU 7.2 on 2026-11-25 (``virsh qemu-monitor-event``): a ``systemctl reboot`` in the guest, then the stop of the
process that libvirt answers it with.
"""

from __future__ import annotations

import pytest

from gpufleet.lab.resetd import restarts

GUEST_REBOOT = '{"guest":true,"reason":"guest-reset"}'
THEN_STOPPED = '{"guest":false,"reason":"host-signal"}'


def test_a_guest_reboot_of_a_lab_host_starts_it_again():
    assert restarts("SHUTDOWN", "gpufleet-lab-1", GUEST_REBOOT)


def test_a_host_side_reset_starts_it_again():
    assert restarts("SHUTDOWN", "gpufleet-lab-2", '{"guest":false,"reason":"host-qmp-system-reset"}')


@pytest.mark.parametrize(
    "details",
    [
        '{"guest":true,"reason":"guest-shutdown"}',  # poweroff in the guest: stays off
        THEN_STOPPED,  # libvirt stopping QEMU after the reset: the reset event already counted
        '{"guest":false,"reason":"host-qmp-quit"}',
        None,
        "not json",
    ],
)
def test_power_offs_and_stops_leave_the_host_off(details):
    assert not restarts("SHUTDOWN", "gpufleet-lab-1", details)


def test_only_lab_domains_and_shutdown_events_count():
    assert not restarts("SHUTDOWN", "someone-elses-vm", GUEST_REBOOT)
    assert not restarts("RESET", "gpufleet-lab-1", GUEST_REBOOT)
