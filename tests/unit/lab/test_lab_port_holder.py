"""A port the lab's Redfish emulator needs, held by a process the lab did not start (gpufleet.lab.virt.tcp_listener,
gpufleet.lab.redfish.ensure_emulator). Seen when ~/.cache/gpufleet was moved aside while an earlier lab's emulator
still ran: the new lab's emulator could not bind the port, the old one answered for hosts it did not know, and every
lab test failed on an HTTP 500 from it. Real sockets, bound by the test on free ports."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.lab import redfish
from gpufleet.lab.virt import tcp_listener


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_listener_of_a_port_is_named_by_pid_and_command_line(held_port: int):
    holder = tcp_listener(held_port)
    assert holder is not None and holder.startswith(f"pid {os.getpid()} (") and "python" in holder


def test_a_port_nothing_listens_on_has_no_listener():
    assert tcp_listener(_free_port()) is None


def test_a_socket_without_a_visible_owner_is_still_a_listener(tmp_path: Path):
    # a recorded /proc: the LISTEN row of 127.0.0.1:8000 (hex 1F40), and no process whose descriptors show its inode
    (tmp_path / "net").mkdir()
    (tmp_path / "net/tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100\n"
    )
    assert tcp_listener(8000, proc=tmp_path) == "a process this user cannot see"
    assert tcp_listener(8001, proc=tmp_path) is None


def test_the_lab_refuses_a_redfish_port_another_process_holds(
    held_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    (tmp_path / "lab").mkdir()
    monkeypatch.setattr(redfish, "REDFISH_PORT", held_port)
    with pytest.raises(redfish.RedfishUnavailable, match=rf"port {held_port} is held by pid {os.getpid()} \("):
        redfish.ensure_emulator(["some-uuid"], progress=print)
    assert not (tmp_path / "lab/sushy.conf").exists()  # refused before writing the emulator's config
