"""The booted snapshot's domains (gpufleet/lab/snapshot.py, virt.py): a restored host must have exactly the template's
devices (QEMU loads the saved state into them), and its NVMe controller hot-plugged as a cold boot has it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from gpufleet.lab import snapshot, virt
from gpufleet.lab.accel import Accel

TCG = Accel("tcg", "no KVM")


def _host(tmp_path: Path, name: str, port: int) -> virt.LabHost:
    d = tmp_path / name
    return virt.LabHost(name, f"uuid-{name}", port, d / "disk.qcow2", d / "serial.log")


def _devices(xml: str) -> list[str]:
    """The QEMU devices a domain adds on its command line, by driver and id (what a saved state is loaded into)."""
    args = re.findall(r"<qemu:arg value='([^']*)'/>", xml)
    devices = [args[i + 1] for i, a in enumerate(args) if a == "-device"]
    return [",".join(p for p in d.split(",") if p.split("=")[0] in {"id", "bus"} or "=" not in p) for d in devices]


def test_a_restored_host_has_the_templates_devices_and_loads_its_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    template = virt.domain_xml(snapshot.template_host(tmp_path / "t", 22400), TCG, boot="template")
    restore = virt.domain_xml(_host(tmp_path, "test-1", 22301), TCG, boot="restore")
    cold = virt.domain_xml(_host(tmp_path, "test-1", 22301), TCG, boot="cold")
    assert _devices(restore) == _devices(template)
    assert not any(d.startswith("nvme,") for d in _devices(template))
    assert "<qemu:arg value='-loadvm'/><qemu:arg value='booted'/>" in restore
    assert "-loadvm" not in cold and "-loadvm" not in template
    assert _devices(cold) == [*_devices(template), "nvme,id=labnvme,bus=labrp1"]
    # everything outside the devices is the same domain, but for the host's own name, UUID, serial and paths
    strip = re.compile(r"<qemu:commandline>.*</qemu:commandline>", re.S)
    assert strip.sub("", restore).count("\n") == strip.sub("", template).count("\n")


def test_the_hot_plugged_controller_is_the_one_a_cold_boot_has(tmp_path, monkeypatch):
    host = _host(tmp_path, "test-2", 22302)
    sent: list[list[str]] = []

    def virsh(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        sent.append(list(args))
        return subprocess.CompletedProcess(args, 0, '{"return":{},"id":"libvirt-20"}', "")

    monkeypatch.setattr(virt, "virsh", virsh)
    virt.hotplug_nvme(host)
    ((command, domain, payload),) = sent
    assert (command, domain) == ("qemu-monitor-command", "gpufleet-test-2")
    added = json.loads(payload)["arguments"]
    cold = next(d for d in virt.qemu_device_args(host) if d.startswith("nvme,"))
    assert cold == ",".join(["nvme"] + [f"{k}={v}" for k, v in added.items() if k != "driver"])
    assert added["sriov_max_vfs"] == 4 and added["bus"] == "labrp1" and added["subsys"] == "labsubsys"


def test_a_refused_hotplug_says_why(tmp_path, monkeypatch):
    def virsh(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, 0, '{"error":{"class":"GenericError","desc":"Bus busy"}}', "")

    monkeypatch.setattr(virt, "virsh", virsh)
    with pytest.raises(virt.LibvirtUnavailable, match=r"test-1: device_add of its NVMe controller: .*Bus busy"):
        virt.hotplug_nvme(_host(tmp_path, "test-1", 22301))


def test_the_snapshot_is_kept_by_what_it_depends_on(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    monkeypatch.setattr(snapshot, "_qemu_version", lambda: "QEMU emulator version 7.2.19")
    base = snapshot.key("a166abc3b110ef23", TCG)
    assert snapshot.key("a166abc3b110ef23", TCG) == base
    assert snapshot.key("0000000000000000", TCG) != base  # another image
    assert snapshot.key("a166abc3b110ef23", Accel("kvm", "probe booted")) != base  # another accelerator
    monkeypatch.setenv("GPUFLEET_LAB_TCG_THREADS", "multi")
    assert snapshot.key("a166abc3b110ef23", TCG) != base  # another emulator (one thread per vCPU)
    monkeypatch.delenv("GPUFLEET_LAB_TCG_THREADS")
    monkeypatch.setattr(snapshot, "_qemu_version", lambda: "QEMU emulator version 8.0.0")
    assert snapshot.key("a166abc3b110ef23", TCG) != base  # another QEMU


def test_a_restored_host_takes_the_name_it_was_given_and_the_time_now():
    script = snapshot.identity_script("test-1", 1_795_000_000.4)
    assert "hostnamectl set-hostname test-1;" in script and "date -s @1795000000 " in script
    assert script.startswith("set -e;")  # a step that fails stops it, and lab up says so
    assert "machine-id" not in script  # journald keeps its journal under the ID it started with
