"""KVM where it works, QEMU's software emulation (TCG) otherwise, decided by a probe boot and cached.

``/dev/kvm`` existing is not enough: on a PVM host a stock Debian kernel does not boot under it. The probe boots the
lab's guest kernel under KVM with no root file system; a kernel that gets as far as looking for one (it then
panics, as asked) proves KVM works.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import selectors
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gpufleet.lab.config import lab_dir

PROBE_SECONDS = 45  # the probe boot's whole limit
# Under KVM the guest kernel prints its banner ("Linux version ...") on the console about a second after the
# firmware's lines (it then panics, as asked, in a few more). Where KVM cannot run it (a PVM host), the firmware's
# lines come and then nothing, with QEMU spinning a core in the host kernel: the probe stops after this long without
# the banner instead of waiting out PROBE_SECONDS (45 s of a core, twice in a CI run).
SILENT_S = 10
BANNER = b"Linux version"
# The vCPU model under software emulation: QEMU's baseline x86-64 CPU with 1 GiB pages (the hugepages plan reserves
# 1 GiB pages at boot, which need pdpe1gb). Not ``max``: with every feature QEMU can emulate, the guest kernel
# initialises AVX2/AES-NI code paths and udev loads a dozen CPU-feature crypto modules (aesni_intel, sha*_ssse3,
# ghash_clmulni...), each self-tested under emulation. Measured on one lab host alone on 2 cores (2026-11-28, four
# reboots): reboot to SSH 45-46 s with this model, 59-61 s with ``max``; systemd-analyze 25-27 s against 36-37 s.
# Debian 12's userland needs only baseline x86-64. Under KVM the host's own CPU is passed through.
TCG_CPU_MODEL = "qemu64"
TCG_CPU_FEATURES = ("pdpe1gb",)
CACHE_FILE = "accel.json"  # the probe's answer, keyed by probe_key (.ci/run removes it to prove the cold path)


@dataclass(frozen=True)
class Accel:
    name: str  # "kvm" or "tcg"
    reason: str

    @property
    def tcg_single_thread(self) -> bool:
        """One TCG thread per VM (see virt.QEMU_WRAPPER): faster when the lab's VMs outnumber the cores, as in
        ``make test``. ``GPUFLEET_LAB_TCG_THREADS=multi`` gives each vCPU its own thread instead, for one VM with
        parallel work on an otherwise idle machine (``make test-slow``'s DKMS build)."""
        return self.name != "kvm" and os.environ.get("GPUFLEET_LAB_TCG_THREADS", "single") != "multi"

    @property
    def qemu_args(self) -> list[str]:
        if self.name == "kvm":
            return ["-accel", "kvm", "-cpu", "host"]
        cpu = ",".join([TCG_CPU_MODEL, *(f"{feature}=on" for feature in TCG_CPU_FEATURES)])
        return ["-accel", "tcg,thread=single" if self.tcg_single_thread else "tcg,thread=multi", "-cpu", cpu]

    @property
    def libvirt_cpu(self) -> str:
        """The domain's ``<cpu>`` opening and model: the host's CPU under KVM, :data:`TCG_CPU_MODEL` otherwise."""
        if self.name == "kvm":
            return "<cpu mode='host-passthrough' check='none'>"
        features = "".join(f"<feature policy='require' name='{f}'/>" for f in TCG_CPU_FEATURES)
        model = f"<model fallback='forbid'>{TCG_CPU_MODEL}</model>"
        return f"<cpu mode='custom' match='exact' check='none'>{model}{features}"

    @property
    def libvirt_type(self) -> str:
        return "kvm" if self.name == "kvm" else "qemu"


def probe_key(kernel: Path) -> str:
    """What the probe's answer depends on: the host kernel, /dev/kvm, QEMU's version and the guest kernel. The
    cached answer is used only while all of them are the same."""
    kvm = os.stat("/dev/kvm")
    try:
        qemu = subprocess.run(
            ["qemu-system-x86_64", "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout.splitlines()[:1]
    except (OSError, subprocess.TimeoutExpired):
        qemu = []
    guest = hashlib.sha256(kernel.read_bytes()).hexdigest()[:16]
    return f"{platform.release()}|kvm {kvm.st_rdev}:{kvm.st_mode:o}|{''.join(qemu)}|guest {guest}"


def detect(kernel: Path) -> Accel:
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Accel("tcg", "no usable /dev/kvm")
    key = probe_key(kernel)
    cache = lab_dir() / CACHE_FILE
    try:
        known = json.loads(cache.read_text())
        if known.get("key") == key:
            return Accel(known["name"], known["reason"])
    except (OSError, ValueError, KeyError):
        pass
    result = _probe(kernel)
    cache.write_text(json.dumps({"key": key, "name": result.name, "reason": result.reason}))
    return result


def _probe(kernel: Path) -> Accel:
    cmd = [
        "qemu-system-x86_64", "-machine", "q35", "-accel", "kvm", "-cpu", "host", "-m", "256", "-nographic",
        "-no-reboot", "-nic", "none", "-kernel", str(kernel), "-append", "console=ttyS0 panic=-1",
    ]  # fmt: skip
    # QEMU with -nographic sets O_NONBLOCK on its stdin; a shared one (the caller's /dev/null under CI) would stay
    # non-blocking for every later process, and ansible-playbook refuses to run with that
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = _console(proc, PROBE_SECONDS, SILENT_S)
    silent = BANNER not in out
    if proc.poll() is None:  # still running: a guest kernel that never started, or one that never panicked
        proc.kill()
    err = proc.communicate()[1]
    text = out.decode(errors="replace")
    if "VFS:" in text or "Kernel panic" in text:
        return Accel("kvm", "KVM boots the guest kernel")
    errors = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
    why = f": {errors[0].removeprefix('qemu-system-x86_64: ')}" if errors else ""
    if silent and not why:
        why = f": no kernel banner on its console in {SILENT_S} s"
    return Accel("tcg", f"KVM is present but the guest kernel does not boot under it (e.g. a PVM host){why}")


def _console(proc: subprocess.Popen[bytes], limit_s: float, silent_s: float) -> bytes:
    """What the probe guest writes to its console, read until its kernel panics, QEMU exits, ``limit_s`` pass, or
    ``silent_s`` pass without the kernel's banner."""
    assert proc.stdout is not None
    out = b""
    started = time.monotonic()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while b"VFS:" not in out and b"Kernel panic" not in out:
            left = (limit_s if BANNER in out else silent_s) - (time.monotonic() - started)
            if left <= 0 or not sel.select(timeout=left):
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:  # QEMU exited
                break
            out += chunk
    return out
