"""SSH to lab hosts with the lab-only key (host keys are per-VM and throw-away: not recorded)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

OPTIONS = [
    "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
    "-o", "BatchMode=yes",
]  # fmt: skip


# How long ssh waits for the TCP connect and the server's banner: a poll for a booting host gives up after
# POLL_CONNECT_S and tries again; a command waits longer, since a host just started from the booted snapshot runs
# slowly for a while (under emulation its code is translated afresh): with five VMs on two cores its sshd took over
# 5 s to send the banner to the first commands after it answered a poll (2026-11-28).
POLL_CONNECT_S = 5
COMMAND_CONNECT_S = 60


def command(key: Path, port: int, remote: str, connect_timeout: int = COMMAND_CONNECT_S) -> list[str]:
    """ssh to a lab host (``connect_timeout``: seconds for the TCP connect and the banner exchange)."""
    return ["ssh", *OPTIONS, "-o", f"ConnectTimeout={connect_timeout}", "-i", str(key), "-p", str(port),
            "root@127.0.0.1", remote]  # fmt: skip


def run(
    key: Path, port: int, remote: str, timeout: float = 120, connect_timeout: int = COMMAND_CONNECT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(key, port, remote, connect_timeout),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def reachable(key: Path, port: int) -> bool:
    try:
        return run(key, port, "true", timeout=15, connect_timeout=POLL_CONNECT_S).returncode == 0
    except subprocess.TimeoutExpired:
        return False


# A booting lab VM whose serial console still grows is slow, not stuck: on a busy 2-core machine under software
# emulation, four VMs booting at once took over 420 s each (2026-11-27). Past ``timeout``, wait() goes on while the
# console has grown within QUIET_S, up to PATIENCE times ``timeout`` in all.
QUIET_S = 180
PATIENCE = 4


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else -1
    except OSError:
        return -1


def console_tail(path: Path, lines: int = 15) -> str:
    """The last lines of a serial console log (for an error that names a stuck boot), or why there are none."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no console log: {exc.strerror})"
    return "\n".join(text.splitlines()[-lines:]) or "(the console printed nothing)"


def wait(
    key: Path,
    port: int,
    timeout: float,
    tick: Callable[[float], None] | None = None,
    console: Path | None = None,
) -> float:
    """Seconds until SSH answers; raises TimeoutError after ``timeout``, or with ``console`` (the VM's serial log)
    once the console has also been silent for QUIET_S (at most PATIENCE x ``timeout`` in all)."""
    start = time.monotonic()
    size, grew = _size(console), start
    while True:
        if reachable(key, port):
            return time.monotonic() - start
        now = time.monotonic()
        elapsed = now - start
        if (current := _size(console)) != size:
            size, grew = current, now
        booting = console is not None and now - grew < QUIET_S and elapsed < PATIENCE * timeout
        if elapsed > timeout and not booting:
            why = f"; its console silent for {now - grew:.0f} s" if console is not None else ""
            raise TimeoutError(f"no SSH on 127.0.0.1:{port} after {elapsed:.0f} s{why}")
        if tick:
            tick(elapsed)
        time.sleep(2)
