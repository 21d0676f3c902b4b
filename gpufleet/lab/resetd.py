"""The lab hosts' reset line: a reset of a lab VM starts it again in a new QEMU process.

Why: under software emulation (TCG) a guest that reboots inside the QEMU process it ran in boots about twice as
slowly as one started in a new process. Measured on 2026-11-25 (2 cores, QEMU 7.2, both lab hosts at once): back
on SSH 110-115 s after ``systemctl reboot`` in the same process, 58-66 s after a stop and start. ``perf`` on the
slow boots shows the vCPU threads in QEMU's translated-code invalidation (``page_collection_lock``,
``tb_invalidate``, ``tcg_flush_jmp_cache``): the new boot writes over memory that still holds code translated in
the previous one. See docs/lab.md.

So the lab's domains are defined with ``<on_reboot>destroy</on_reboot>``: a reset stops QEMU instead. This
daemon, started by ``gpufleet lab up`` like the Redfish emulator (one per machine, for every lab's domains),
listens to QEMU's ``SHUTDOWN`` events through libvirt and starts a lab domain again when the event's reason is a
reset (``guest-reset``: the guest rebooted; ``host-qmp-system-reset``: ``virsh reset``). A power-off by the guest
(``guest-shutdown``) or by the BMC (``ForceOff`` destroys the domain) leaves it off, as on a real machine.

``ensure`` starts it (its log: ``resetd.log`` in the lab directory); it writes its PID to ``resetd.ready`` once it
listens.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpufleet.lab.config import DOMAIN_PREFIX, lab_dir
from gpufleet.lab.virt import URI, alive, start_daemon, started_daemons

RESTART_REASONS = frozenset({"guest-reset", "host-qmp-system-reset"})
STOP_WAIT_SECONDS = 60  # how long a reset domain may take to stop before it is started again


def ready_file() -> Path:
    return lab_dir() / "resetd.ready"


def restarts(event: str, domain: str, details: str | None) -> bool:
    """Whether a QEMU monitor event for ``domain`` is a reset of a lab host (which must come back)."""
    if event != "SHUTDOWN" or not domain.startswith(DOMAIN_PREFIX):
        return False
    try:
        reason = json.loads(details or "{}").get("reason")
    except ValueError:
        return False
    return reason in RESTART_REASONS


def _log(message: str) -> None:
    print(time.strftime("%Y-%m-%d %H:%M:%S"), message, flush=True)


def _start_again(conn: Any, name: str) -> None:
    import libvirt

    try:
        dom = conn.lookupByName(name)
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while dom.isActive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if dom.isActive():
            _log(f"{name}: still running {STOP_WAIT_SECONDS} s after its reset; left as it is")
            return
        dom.create()
        _log(f"{name}: reset; started again in a new QEMU process")
    except libvirt.libvirtError as exc:
        _log(f"{name}: could not be started again after its reset: {exc}")


def _listen() -> tuple[Any, threading.Event]:
    """A connection whose QEMU ``SHUTDOWN`` events restart reset lab domains, and an event set when libvirtd closes
    it (e.g. ``lab up`` restarts libvirtd with a new qemu.conf)."""
    import libvirt
    import libvirt_qemu

    conn = libvirt.open(URI)
    closed = threading.Event()
    conn.registerCloseCallback(lambda _c, _reason, _opaque: closed.set(), None)

    def on_event(_conn: Any, dom: Any, event: str, _s: int, _us: int, details: str | None, _opaque: Any) -> None:
        name = dom.name()
        if restarts(event, name, details):
            _log(f"{name}: {event} {details}")
            threading.Thread(target=_start_again, args=(conn, name), daemon=True).start()

    libvirt_qemu.qemuMonitorEventRegister(conn, None, "SHUTDOWN", on_event, None, 0)
    conn.setKeepAlive(5, 3)
    return conn, closed


def _listen_again(seconds: float = 60) -> tuple[Any, threading.Event] | None:
    """``_listen`` once libvirtd answers again, or None after ``seconds``."""
    import libvirt

    deadline = time.monotonic() + seconds
    while True:
        try:
            return _listen()
        except libvirt.libvirtError as exc:
            if time.monotonic() > deadline:
                _log(f"libvirtd did not come back in {seconds:.0f} s ({exc})")
                return None
            time.sleep(1)


def main() -> int:
    import libvirt

    libvirt.virEventRegisterDefaultImpl()
    _conn, closed = _listen()
    ready_file().write_text(str(os.getpid()))
    _log(f"listening on {URI} for resets of {DOMAIN_PREFIX}* domains")
    while True:
        libvirt.virEventRunDefaultImpl()
        if closed.is_set():
            _log("libvirtd closed the connection; connecting again")
            listening = _listen_again()
            if listening is None:
                return 1
            _conn, closed = listening
            _log(f"listening again on {URI}")


def ensure(progress: Callable[[str], None]) -> int:
    """The running reset daemon's PID; started (and recorded in daemons.json) when it is not running."""
    ours = started_daemons().get("resetd")
    if ours and alive(ours):
        return ours
    ready = ready_file()
    ready.unlink(missing_ok=True)
    argv = [sys.executable, "-c", "import sys; from gpufleet.lab import resetd; sys.exit(resetd.main())"]
    pid = start_daemon("resetd", argv, lambda pid: ready.exists() and ready.read_text() == str(pid), seconds=30)
    progress(f"reset daemon listening (pid {pid}): a reset starts a lab VM in a new QEMU process")
    return pid
