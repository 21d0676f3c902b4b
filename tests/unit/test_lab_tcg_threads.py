"""How many TCG threads a lab VM gets: one per VM, or one per vCPU for make test-slow (gpufleet/lab/accel.py)."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET

from gpufleet.lab import virt
from gpufleet.lab.accel import Accel

TCG = Accel("tcg", "no KVM")
KVM = Accel("kvm", "probe booted")


def test_tcg_runs_one_thread_per_vm_by_default(monkeypatch, tmp_path):
    monkeypatch.delenv("GPUFLEET_LAB_TCG_THREADS", raising=False)
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    assert TCG.qemu_args[:2] == ["-accel", "tcg,thread=single"]
    assert virt.emulator(TCG) == str(tmp_path / "lab" / "qemu-tcg-single")  # libvirt cannot set thread=single
    assert f"<emulator>{virt.emulator(TCG)}</emulator>" in virt.domain_xml(_host(tmp_path), TCG)


def test_make_test_slow_asks_for_a_thread_per_vcpu(monkeypatch):
    monkeypatch.setenv("GPUFLEET_LAB_TCG_THREADS", "multi")
    assert TCG.qemu_args[:2] == ["-accel", "tcg,thread=multi"]
    assert virt.emulator(TCG) == virt.QEMU


def test_kvm_runs_qemu_itself(monkeypatch):
    monkeypatch.delenv("GPUFLEET_LAB_TCG_THREADS", raising=False)
    assert virt.emulator(KVM) == virt.QEMU and KVM.qemu_args[:2] == ["-accel", "kvm"]


def test_a_reset_stops_the_domain_for_the_reset_daemon_to_start_again(tmp_path):
    assert "<on_reboot>destroy</on_reboot>" in virt.domain_xml(_host(tmp_path), KVM)


def test_an_emulated_host_gets_the_baseline_cpu_with_1_gib_pages_in_both_backends(tmp_path):
    """Under TCG both backends give the guest QEMU's baseline model plus pdpe1gb (the plan's boot-time 1 GiB pages
    need it), not ``max`` (whose AVX2 and AES-NI paths slow every boot); under KVM the host's CPU."""
    cpu = ET.fromstring(virt.domain_xml(_host(tmp_path), TCG)).find("cpu")
    assert (cpu.get("mode"), cpu.findtext("model")) == ("custom", "qemu64")
    assert [(f.get("policy"), f.get("name")) for f in cpu.findall("feature")] == [("require", "pdpe1gb")]
    assert cpu.find("numa") is not None and cpu.find("topology") is not None
    args = TCG.qemu_args
    assert args[args.index("-cpu") + 1] == "qemu64,pdpe1gb=on"
    assert ET.fromstring(virt.domain_xml(_host(tmp_path), KVM)).find("cpu").get("mode") == "host-passthrough"
    assert KVM.qemu_args[-2:] == ["-cpu", "host"]


def _host(tmp_path):
    d = tmp_path / "lab-1"
    return virt.LabHost("lab-1", "uuid-1", 22221, d / "disk.qcow2", d / "serial.log")


def test_the_wrapper_runs_qemu_with_one_tcg_thread(tmp_path):
    """The libvirt domains' emulator under TCG (virt.TCG_SINGLE_WRAPPER) turns -accel tcg into tcg,thread=single
    and passes every other argument as it was (a stand-in QEMU prints what it got)."""
    fake = tmp_path / "qemu"
    fake.write_text('#!/bin/sh\nprintf "%s|" "$@"\n')
    fake.chmod(0o755)
    wrapper = tmp_path / "qemu-tcg-single"
    wrapper.write_text(virt.TCG_SINGLE_WRAPPER.replace("{qemu}", str(fake)))
    wrapper.chmod(0o755)
    argv = ["-name", "guest=x,debug-threads=on", "-accel", "tcg", "-m", "64", "-append", "a b"]
    out = subprocess.run(
        [str(wrapper), *argv], capture_output=True, text=True, timeout=60, check=True, stdin=subprocess.DEVNULL
    ).stdout
    assert out.split("|")[:-1] == ["-name", "guest=x,debug-threads=on", "-accel", "tcg,thread=single", "-m", "64",
                                   "-append", "a b"]  # fmt: skip
