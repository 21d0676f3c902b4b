"""The lab's BMCs: one ``sushy-emulator`` (OpenStack's Redfish emulator, libvirt driver) and a Redfish client.

The emulator listens on 127.0.0.1 with HTTP basic auth (a bcrypt htpasswd file) and serves only the lab's
domains (``SUSHY_EMULATOR_ALLOWED_INSTANCES``). The client is the same code a real region's BMCs would be driven
with: ``GET /redfish/v1/Systems/<id>`` for the power state, ``POST .../Actions/ComputerSystem.Reset``.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.lab.config import REDFISH_PORT, lab_dir, write_private
from gpufleet.lab.virt import URI, alive, start_daemon, started_daemons

RESET_TYPES = ("On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "PowerCycle")


class RedfishUnavailable(RuntimeError):
    """The BMC path cannot be used here; the message says why."""


class RedfishError(RuntimeError):
    """A Redfish request failed."""


@dataclass(frozen=True)
class Credentials:
    url: str
    user: str
    password: str


def credentials() -> Credentials:
    """The lab's BMC endpoint and credentials (created once, mode 0600)."""
    path = lab_dir() / "redfish.json"
    if path.exists():
        data = json.loads(path.read_text())
    else:
        data = {"user": "gpufleet", "password": secrets.token_urlsafe(18)}
        write_private(path, json.dumps(data))
    return Credentials(f"http://127.0.0.1:{REDFISH_PORT}", data["user"], data["password"])


class Client:
    """``retry_seconds``: how long a refused or reset connection is retried. The lab's one emulator restarts (for
    a second or two) when a lab is added or removed, and labs run side by side (the lab tests and the Molecule
    scenarios); a real BMC that resets its web server is the same case."""

    def __init__(self, creds: Credentials, timeout: float = 30, retry_seconds: float = 30) -> None:
        self.creds = creds
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        token = base64.b64encode(f"{creds.user}:{creds.password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.creds.url + path, data=data, method=method, headers=self.headers)
        deadline = time.monotonic() + self.retry_seconds
        while True:
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
                break
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:300]
                raise RedfishError(f"{method} {path}: HTTP {exc.code} {detail}") from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                if not isinstance(reason, ConnectionError) or time.monotonic() >= deadline:
                    raise RedfishError(f"{method} {path}: {exc}") from None
                time.sleep(0.5)  # the emulator is restarting: the same request again
        return json.loads(raw) if raw.strip() else {}

    def systems(self) -> list[str]:
        members = self.request("GET", "/redfish/v1/Systems")["Members"]
        return [m["@odata.id"].rsplit("/", 1)[-1] for m in members]

    def system(self, system_id: str) -> dict[str, Any]:
        return self.request("GET", f"/redfish/v1/Systems/{system_id}")

    def power_state(self, system_id: str) -> str:
        return self.system(system_id).get("PowerState", "Unknown")

    def reset(self, system_id: str, reset_type: str) -> None:
        if reset_type not in RESET_TYPES:
            raise ValueError(f"reset type {reset_type!r}; valid: {', '.join(RESET_TYPES)}")
        self.request("POST", f"/redfish/v1/Systems/{system_id}/Actions/ComputerSystem.Reset", {"ResetType": reset_type})

    def wait_power(self, system_id: str, state: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.power_state(system_id) == state:
                return
            time.sleep(1)
        raise RedfishError(f"system {system_id} did not reach power state {state} in {timeout:.0f} s")


def _emulator() -> str:
    path = shutil.which("sushy-emulator") or str(Path(sys.executable).with_name("sushy-emulator"))
    if not Path(path).exists():
        raise RedfishUnavailable("sushy-emulator is not installed (pip install 'gpufleet[lab]'; make setup does)")
    return path


def _write_config(uuids: list[str], creds: Credentials) -> Path:
    import bcrypt

    htpasswd = lab_dir() / "redfish.htpasswd"
    hashed = bcrypt.hashpw(creds.password.encode(), bcrypt.gensalt(rounds=10)).decode()
    write_private(htpasswd, f"{creds.user}:{hashed}\n")
    config = lab_dir() / "sushy.conf"
    config.write_text(
        "# written by gpufleet lab: a Redfish BMC for the lab's libvirt domains only\n"
        f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {REDFISH_PORT}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = '{htpasswd}'\n"
        f"SUSHY_EMULATOR_LIBVIRT_URI = '{URI}'\n"
        f"SUSHY_EMULATOR_ALLOWED_INSTANCES = {sorted(uuids)!r}\n"
    )
    return config


def ensure_emulator(uuids: list[str], progress: Any) -> Client:
    """A running emulator serving exactly ``uuids``; started (or restarted, if the lab started it) as needed."""
    creds = credentials()
    client = Client(creds, timeout=10, retry_seconds=0)
    ours = started_daemons().get("sushy")
    state = lab_dir() / "sushy.state.json"
    wanted = sorted(uuids)
    try:
        current = json.loads(state.read_text())["uuids"]
    except (OSError, ValueError, KeyError):
        current = None
    if ours and alive(ours):
        if current == wanted:
            return Client(creds)
        progress("restarting the Redfish emulator for the lab's current hosts")
        os.kill(ours, 15)
        for _ in range(50):
            if not alive(ours):
                break
            time.sleep(0.1)
    else:
        try:
            client.systems()
            raise RedfishUnavailable(
                f"port {REDFISH_PORT} already serves Redfish that the lab did not start (or with other credentials)"
            )
        except RedfishError:
            pass
    config = _write_config(wanted, creds)

    def answers(_pid: int) -> bool:
        try:
            client.systems()
        except RedfishError:
            return False
        return True

    state.write_text(json.dumps({"uuids": wanted}))
    try:
        pid = start_daemon("sushy", [_emulator(), "--config", str(config)], answers, seconds=60)
    except RuntimeError as exc:
        raise RedfishUnavailable(f"sushy-emulator: {exc}") from None
    progress(f"Redfish emulator on {creds.url} (pid {pid})")
    return Client(creds)
