"""The KVM probe's verdict from what the guest writes on its console (gpufleet/lab/accel.py), against TEST DOUBLES of
qemu-system-x86_64: scripts that write what QEMU writes in each case (SeaBIOS's lines, then the guest kernel's, or
nothing more), put first on PATH. The real probe runs in tests/lab/test_accel.py."""

from __future__ import annotations

import time

from gpufleet.lab import accel

FIRMWARE = r"printf '\033c\033[?7lSeaBIOS (version 1.16.2-debian-1.16.2-1)\r\nBooting from ROM...\r\n'"
KERNEL = r"printf '[    0.000000] Linux version 6.1.0-28-amd64\r\n'"
PANIC = r"printf '[    0.912000] VFS: Cannot open root device\r\n[    0.913000] Kernel panic - not syncing\r\n'"


def _qemu(tmp_path, monkeypatch, script: str) -> None:
    fake = tmp_path / "bin" / "qemu-system-x86_64"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    monkeypatch.setattr(accel, "SILENT_S", 1)
    monkeypatch.setattr(accel, "PROBE_SECONDS", 20)


def test_a_guest_kernel_that_panics_as_asked_means_kvm(tmp_path, monkeypatch):
    # -no-reboot with panic=-1: QEMU exits at the panic
    _qemu(tmp_path, monkeypatch, f"{FIRMWARE}; sleep 0.3; {KERNEL}; sleep 1.5; {PANIC}")
    assert accel._probe(tmp_path / "vmlinuz") == accel.Accel("kvm", "KVM boots the guest kernel")


def test_firmware_lines_and_then_silence_mean_tcg_after_silent_s_not_the_whole_limit(tmp_path, monkeypatch):
    # what a PVM host shows: SeaBIOS starts the kernel, which never prints (QEMU spins in the host kernel)
    _qemu(tmp_path, monkeypatch, f"{FIRMWARE}; exec sleep 30")
    started = time.monotonic()
    result = accel._probe(tmp_path / "vmlinuz")
    assert time.monotonic() - started < 10  # SILENT_S (1 s here), not PROBE_SECONDS (20 s) or the script's 30 s
    assert result.name == "tcg"
    assert result.reason.endswith("does not boot under it (e.g. a PVM host): no kernel banner on its console in 1 s")


def test_qemu_refusing_kvm_means_tcg_with_its_reason(tmp_path, monkeypatch):
    error = "Could not access KVM kernel module: Permission denied"
    _qemu(tmp_path, monkeypatch, f"echo 'qemu-system-x86_64: {error}' >&2; exit 1")
    result = accel._probe(tmp_path / "vmlinuz")
    assert result.name == "tcg" and result.reason.endswith(f"(e.g. a PVM host): {error}")
