"""A real Redfish service for tests: sushy-emulator with its fake driver (sushy-tools' in-memory systems), on
127.0.0.1, HTTP basic auth from a bcrypt htpasswd file as the lab sets it up, over HTTP or HTTPS (a self-signed
certificate).

The fake driver applies a power change 1 to 11 s (random) after the request; :data:`LAUNCH` runs the emulator with
the delay's random draw at its lower bound (a change lands within a second). Everything else is sushy-tools as
shipped.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

USER = "admin"
LAUNCH = (
    "import random, sys; random.randint = lambda low, high: low; "
    "from sushy_tools.emulator.main import main; sys.exit(main())"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def htpasswd(path: Path, password: str) -> Path:
    import bcrypt

    path.write_text(f"{USER}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    return path


def wait_until_answering(url: str, proc: subprocess.Popen[bytes], log: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sushy-emulator exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if requests.get(f"{url}/redfish/v1/", timeout=2, verify=False).ok:
                return
        except requests.RequestException:
            time.sleep(0.1)
    raise RuntimeError(f"sushy-emulator did not answer in {seconds} s: {log.read_text()[-2000:]}")


@contextmanager
def running(config: Path, url: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """sushy-emulator with ``config`` (its settings file), answering at ``url``; stopped on exit."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_answering(url, proc, log)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
