"""A distcc server on this machine for the lab hosts' C compiles (test bed for `make test-slow`, not part of gpufleet).

Under software emulation a lab host runs gcc 20-50 times slower than this machine does: the nvidia_driver scenario's
DKMS build of NVIDIA's open modules (some 400 conftest probes, then ~190 source files) took 50-90 minutes in the
guest. With distcc the guest still runs the build (make, NVIDIA's conftest.sh, the preprocessor, the linker, DKMS's
install), and only the compiler proper (gcc's cc1 on the preprocessed source) runs here, natively, with the same
Debian gcc-12 package: the scenario's prepare step (tests/molecule/distcc.yml) turns distcc on only when the guest
would install the same gcc-12 version as this machine has, so the objects are what the guest's own gcc would make.
A compile the server cannot take falls back to the guest's gcc (distcc's default), so the server decides only
how long the build takes, never whether it passes.

The server listens on 127.0.0.1 only; QEMU's user-mode network connects the guest's 10.0.2.2 to it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

GUEST_HOST_ADDRESS = "10.0.2.2"  # the host as QEMU's user-mode network (slirp) shows it to the guest
ENV = "GPUFLEET_LAB_DISTCC"  # host:port/jobs for the guest's /etc/distcc/hosts; unset: compile in the guest
ENV_GCC = "GPUFLEET_LAB_DISTCC_GCC"  # this machine's gcc-12 package version, which the guest must match
JOBS = 2 * (os.cpu_count() or 1)  # compiles at once: the guest's preprocessing keeps fewer than that busy


@dataclass
class Distccd:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def env(self) -> dict[str, str]:
        return {ENV: f"{GUEST_HOST_ADDRESS}:{self.port}/{JOBS}", ENV_GCC: gcc_version()}

    def compiled(self) -> tuple[int, int]:
        """Compiles this server finished, and those that failed (a failed conftest probe is a compile error)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return len(re.findall(r"COMPILE_OK", text)), len(re.findall(r"COMPILE_ERROR", text))

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # its own session: the server and its preforked children
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def gcc_version() -> str:
    """The installed gcc-12 package's version on this machine ('' when there is none)."""
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "gcc-12"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(workdir: Path) -> Distccd | None:
    """Start distccd on a free loopback port; None (the guests compile themselves) when distcc or gcc-12 is missing."""
    distccd = shutil.which("distccd") or shutil.which("distccd", path="/usr/sbin:/usr/bin")
    if distccd is None or not gcc_version():
        return None
    log = workdir / "distccd.log"
    port = _free_port()
    # distccd drops root for its own user, which could not open a log file here: it logs to the stderr we open
    with log.open("wb") as stderr:
        process = subprocess.Popen(  # pylint: disable=consider-using-with  # stopped by Distccd.stop
            [distccd, "--daemon", "--no-detach", "--log-stderr", "--log-level", "info",
             "--listen", "127.0.0.1", "--allow", "127.0.0.1", "--port", str(port), "--jobs", str(JOBS)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )  # fmt: skip
    server = Distccd(process, port, log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"distccd did not start on 127.0.0.1:{port}; see {log}")
