"""`lab down` stops the daemons it started once no VM lab is left, even when a stale `lab-*.json` remains (a lab whose
process was killed and whose hosts are gone since: issue 40 found the emulator and resetd running on). Container labs
need none of the VM labs' daemons. The state files here are written by the test in a throwaway GPUFLEET_CACHE, and
libvirt is asked nothing (its answer is monkeypatched: the lab's VMs are not what is tested)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpufleet.lab as lab_mod
from gpufleet.lab import Lab, LabError


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    monkeypatch.setattr(lab_mod, "_libvirt_answers", lambda: False)  # no libvirt: liveness from the hosts' files
    # and `down` must not start this machine's libvirtd to remove domains (it did, left running, 2026-11-28)
    monkeypatch.setattr(lab_mod.Lab, "_libvirt_for_down", lambda self: False)
    return tmp_path


@pytest.fixture
def stopped(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(lab_mod.virt, "stop_started_daemons", lambda progress: calls.append("stopped"))
    return calls


def _vm_state(cache: Path, prefix: str, with_disk: bool) -> Path:
    d = cache / "lab" / "hosts" / f"{prefix}-1"
    if with_disk:
        d.mkdir(parents=True)
        (d / "disk.qcow2").write_bytes(b"")
    host = {
        "name": f"{prefix}-1",
        "uuid": "u-" + prefix,
        "ssh_port": 22380,
        "disk": str(d / "disk.qcow2"),
        "serial_log": str(d / "serial.log"),
    }
    path = cache / "lab" / f"lab-{prefix}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hosts": [host], "backend": "qemu"}))
    return path


def test_a_stale_lab_state_is_removed_and_the_daemons_are_stopped(cache: Path, stopped: list[str]):
    stale = _vm_state(cache, "molhugepages", with_disk=False)
    said: list[str] = []
    Lab("lab", 1, progress=said.append).down()
    assert stopped == ["stopped"]
    assert not stale.exists()
    assert "lab-molhugepages.json: none of its hosts exists any more; removing this stale lab state" in said


def test_a_live_vm_lab_keeps_the_daemons_running(cache: Path, stopped: list[str]):
    live = _vm_state(cache, "test", with_disk=True)
    said: list[str] = []
    Lab("lab", 1, progress=said.append).down()
    assert stopped == [] and live.exists()
    assert any("other VM labs are still up (test)" in line for line in said)


def test_a_container_lab_needs_no_vm_daemon(cache: Path, stopped: list[str]):
    state = cache / "lab" / "lab-ctest.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"kind": "container", "hosts": [{"name": "ctest-1", "uuid": "u", "ssh_port": 22381}]}))
    Lab("lab", 1, progress=lambda _m: None).down()
    assert stopped == ["stopped"] and state.exists()  # the container lab itself is left alone


def test_a_lab_keeps_its_kind_and_refuses_to_come_up_as_the_other(cache: Path):
    state = cache / "lab" / "lab-ctest.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"kind": "container", "hosts": []}))
    assert Lab("ctest", 1).kind == "container"
    refused = "lab 'ctest' is up as container hosts; `gpufleet lab down --prefix ctest` first"
    with pytest.raises(LabError, match=refused):
        Lab("ctest", 1, kind="vm").up()
    with pytest.raises(LabError, match="lab kind 'pod'"):
        Lab("other", 1, kind="pod")


def test_a_state_file_of_another_lab_version_is_not_taken_for_stale(cache: Path, stopped: list[str]):
    """A lab's hosts are found by name: a state file with other keys (an older checkout's `namespace`, say) whose
    host still has its disk keeps the daemons running instead of being removed while its VM runs (2026-11-28)."""
    live = _vm_state(cache, "test", with_disk=True)
    state = json.loads(live.read_text())
    state["hosts"][0] = {"name": "test-1", "namespace": "/gone/nvme-ns.img"}  # no disk, serial_log, uuid keys
    live.write_text(json.dumps(state))
    Lab("lab", 1, progress=lambda _m: None).down()
    assert stopped == [] and live.exists()
