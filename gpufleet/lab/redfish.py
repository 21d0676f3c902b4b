"""The lab's BMCs: one ``sushy-emulator`` (OpenStack's Redfish emulator, libvirt driver) and a Redfish client.

The emulator listens on 127.0.0.1 with HTTP basic auth (a bcrypt htpasswd file) and serves only the lab's
domains (``SUSHY_EMULATOR_ALLOWED_INSTANCES``). The client is :class:`gpufleet.baremetal.bmc.Bmc` (sushy), the code a
real region's BMCs are driven with: ``ComputerSystem`` power state, ``ComputerSystem.Reset`` among its allowed types.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.baremetal.bmc import Bmc, BmcError, Endpoint, Inventory
from gpufleet.common.atomic import write_atomic
from gpufleet.lab.config import REDFISH_PORT, lab_dir, write_private
from gpufleet.lab.virt import URI, alive, start_daemon, started_daemons, tcp_listener, virsh

# A failed Redfish request, by the lab's name for it (one line; never the password).
RedfishError = BmcError
# The libvirt storage pool of the virtual media the lab's BMC inserts.
MEDIA_POOL = "gpufleet-media"


class RedfishUnavailable(RuntimeError):
    """The BMC path cannot be used here; the message says why."""


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
    """The lab's BMC through :class:`gpufleet.baremetal.bmc.Bmc`, connected on first use. ``retry_seconds``: how long a
    refused or reset connection is retried. The lab's one emulator restarts (for a second or two) when a lab is
    added or removed, and labs run side by side (the lab tests and the Molecule scenarios); a real BMC that resets
    its web server is the same case."""

    def __init__(self, creds: Credentials, timeout: float = 30, retry_seconds: float = 30) -> None:
        self.creds = creds
        endpoint = Endpoint(
            creds.url,
            creds.user,
            creds.password,
            connect_timeout=timeout,
            read_timeout=timeout,
            retry_seconds=retry_seconds,
        )
        self.bmc = Bmc(endpoint)

    def systems(self) -> list[str]:
        return self.bmc.system_ids()

    def system(self, system_id: str) -> Inventory:
        return self.bmc.inventory(system_id)

    def power_state(self, system_id: str) -> str:
        return self.bmc.power_state(system_id)

    def reset(self, system_id: str, reset_type: str) -> None:
        """``ComputerSystem.Reset``; a type the system does not allow is refused naming those it does."""
        self.bmc.reset(system_id, reset_type)

    def wait_power(self, system_id: str, state: str, timeout: float = 60) -> None:
        self.bmc.wait_power(system_id, state, timeout)


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
    write_atomic(
        config,
        "# written by gpufleet lab: a Redfish BMC for the lab's libvirt domains only\n"
        f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {REDFISH_PORT}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = '{htpasswd}'\n"
        f"SUSHY_EMULATOR_LIBVIRT_URI = '{URI}'\n"
        f"SUSHY_EMULATOR_ALLOWED_INSTANCES = {sorted(uuids)!r}\n"
        f"SUSHY_EMULATOR_STORAGE_POOL = '{MEDIA_POOL}'\n",
    )
    return config


def ensure_media_pool() -> None:
    """The libvirt storage pool the emulator puts virtual media images in (a directory under the lab's cache): a
    BMC's VirtualMedia.InsertMedia downloads the image and attaches it to the domain as a CD-ROM.

    The pool is transient (it lives as long as the libvirtd the lab started) and always points at this lab cache's
    directory, which is created first: a pool left defined by an earlier run, or pointing at a cache that was
    moved or emptied since, is replaced rather than trusted."""
    target = lab_dir() / "media"
    target.mkdir(parents=True, exist_ok=True)
    current = virsh("pool-dumpxml", MEDIA_POOL, check=False)
    if current.returncode == 0:
        running = "running" in virsh("pool-info", MEDIA_POOL, check=False).stdout
        if running and f"<path>{target}</path>" in current.stdout:
            return
        virsh("pool-destroy", MEDIA_POOL, check=False)
        virsh("pool-undefine", MEDIA_POOL, check=False)  # a persistent definition of an earlier version
    virsh("pool-create-as", MEDIA_POOL, "dir", "--target", str(target))


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
    elif (holder := tcp_listener(REDFISH_PORT)) is not None:
        # e.g. the emulator of a lab whose cache was moved aside: it would answer for the hosts it was started for,
        # with the credentials file at the same path, and a new emulator could not bind the port
        raise RedfishUnavailable(
            f"port {REDFISH_PORT} is held by {holder}, which this lab ({lab_dir()}) did not start: stop that process"
            " (`gpufleet lab down` with the cache that started it stops the emulator of its last lab)"
        )
    ensure_media_pool()
    config = _write_config(wanted, creds)

    def answers(_pid: int) -> bool:
        try:
            client.systems()
        except RedfishError:
            return False
        return True

    write_atomic(state, json.dumps({"uuids": wanted}))
    try:
        pid = start_daemon("sushy", [_emulator(), "--config", str(config)], answers, seconds=60)
    except RuntimeError as exc:
        raise RedfishUnavailable(f"sushy-emulator: {exc}") from None
    progress(f"Redfish emulator on {creds.url} (pid {pid})")
    return Client(creds)
