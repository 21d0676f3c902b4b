"""How many TCG threads a lab VM gets: one per VM, or one per vCPU for make test-slow (gpufleet/lab/accel.py)."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

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


def _wrapper(tmp_path, monkeypatch, accel: Accel, nice: int):
    """``define``'s wrapper for ``accel`` and ``nice``, around a stand-in QEMU that prints its nice value and its
    arguments."""
    fake = tmp_path / "qemu"
    fake.write_text(
        '#!/bin/sh\nprintf "%s|" "$(nice)" "$@"\n[ "$1" != autogroup ] || printf "%s|" "$(cat /proc/$$/autogroup)"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(virt, "QEMU", str(fake))
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(virt._wrapper(accel, nice))
    wrapper.chmod(0o755)
    return wrapper


def _run(wrapper, argv: list[str]) -> list[str]:
    out = subprocess.run(
        [str(wrapper), *argv], capture_output=True, text=True, timeout=60, check=True, stdin=subprocess.DEVNULL
    ).stdout
    return out.split("|")[:-1]


ARGV = ["-name", "guest=x,debug-threads=on", "-accel", "tcg", "-m", "64", "-append", "a b"]


def test_the_wrapper_runs_qemu_with_one_tcg_thread(tmp_path, monkeypatch):
    """The libvirt domains' emulator under TCG (virt.QEMU_WRAPPER) turns -accel tcg into tcg,thread=single
    and passes every other argument as it was (a stand-in QEMU prints what it got), at the caller's priority."""
    monkeypatch.delenv("GPUFLEET_LAB_TCG_THREADS", raising=False)
    got = _run(_wrapper(tmp_path, monkeypatch, TCG, 0), ARGV)
    assert got == [str(os.getpriority(os.PRIO_PROCESS, 0)), "-name", "guest=x,debug-threads=on", "-accel",
                   "tcg,thread=single", "-m", "64", "-append", "a b"]  # fmt: skip


def test_a_lab_brought_up_under_nice_runs_its_vms_at_that_priority(tmp_path, monkeypatch):
    """`define` in a process at nice 5 (the lab tests' lanes) gives the domain a wrapper that starts QEMU 5 lower
    than libvirtd (which the lab starts at its own priority, never a lane's): one TCG thread as before."""
    monkeypatch.delenv("GPUFLEET_LAB_TCG_THREADS", raising=False)
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    assert virt.emulator(TCG, 5) == str(tmp_path / "lab" / "qemu-tcg-single-nice5")
    assert f"<emulator>{virt.emulator(TCG, 5)}</emulator>" in virt.domain_xml(_host(tmp_path), TCG, nice=5)
    assert virt.emulator(KVM, 5) == str(tmp_path / "lab" / "qemu-nice5") and virt.emulator(KVM) == virt.QEMU
    wrapper = _wrapper(tmp_path, monkeypatch, TCG, 5)
    got = _run(wrapper, ARGV)
    assert int(got[0]) == os.getpriority(os.PRIO_PROCESS, 0) + 5 and got[1:] == [
        "-name", "guest=x,debug-threads=on", "-accel", "tcg,thread=single", "-m", "64", "-append", "a b"
    ]  # fmt: skip
    own = Path("/proc/self/autogroup")
    if own.exists():  # autogroup scheduling: nice counts within a session's group; libvirt gives QEMU a session
        before = own.read_text()
        group = subprocess.run(
            ["setsid", "-w", str(wrapper), "autogroup"], capture_output=True, text=True, timeout=60, check=True,
            stdin=subprocess.DEVNULL,
        ).stdout.split("|")[-2]  # fmt: skip
        assert group.endswith(" nice 5"), group  # the new session's group, at the VM's nice
        assert own.read_text() == before  # run in this session above: its shared group was left alone
    monkeypatch.setenv("GPUFLEET_LAB_TCG_THREADS", "multi")  # QEMU's own TCG threads, still at nice 5
    got = _run(_wrapper(tmp_path, monkeypatch, TCG, 5), ARGV)
    assert int(got[0]) == os.getpriority(os.PRIO_PROCESS, 0) + 5 and got[1:] == ARGV
