"""SSH to lab hosts with the lab-only key (host keys are per-VM and throw-away: not recorded)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

OPTIONS = [
    "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
    "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
]  # fmt: skip


def command(key: Path, port: int, remote: str) -> list[str]:
    return ["ssh", *OPTIONS, "-i", str(key), "-p", str(port), "root@127.0.0.1", remote]


def run(key: Path, port: int, remote: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(key, port, remote),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def reachable(key: Path, port: int) -> bool:
    try:
        return run(key, port, "true", timeout=15).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def wait(key: Path, port: int, timeout: float, tick: Callable[[float], None] | None = None) -> float:
    """Seconds until SSH answers; raises TimeoutError after ``timeout``."""
    start = time.monotonic()
    while True:
        if reachable(key, port):
            return time.monotonic() - start
        elapsed = time.monotonic() - start
        if elapsed > timeout:
            raise TimeoutError(f"no SSH on 127.0.0.1:{port} after {timeout:.0f} s")
        if tick:
            tick(elapsed)
        time.sleep(2)
