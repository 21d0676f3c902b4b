"""A server's BMC, driven through Redfish with ``sushy`` (OpenStack's Redfish client, the one Ironic uses), and
the host once it is up (its SSH port; its topology read over SSH by :mod:`gpufleet.host.hostfacts`).

Typed all the way: an :class:`Endpoint` in, an :class:`Inventory` / :class:`HostFacts` out. Every failure is a
:class:`BmcError` with a one-line message and a ``kind``: ``invalid`` (an address gpufleet cannot use),
``unreachable``, ``auth`` (HTTP 401/403), ``not-found`` (no such system, no system with that serial),
``mismatch`` (the box is not the one described), ``unsupported`` (an action or value the system does not offer:
the message lists what its ``@Redfish.AllowableValues`` allow), ``timeout`` and ``failed`` (any other Redfish or
SSH error). The BMC password never appears in a message, a log record of this module or a ``repr``.

sushy is imported where it is used (it costs ~0.15 s): ``gpufleet lab`` and the CLI import this module.
"""

from __future__ import annotations

import functools
import json
import logging
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import sushy

Progress = Callable[[str], None]

# sushy logs through the standard logging module; without a handler of the application's own its warnings would
# reach stderr through logging's last resort. The errors gpufleet raises say what went wrong, once.
logging.getLogger("sushy").addHandler(logging.NullHandler())

# The stack's boot sources and the Redfish BootSourceOverrideTarget each one sets (DMTF ComputerSystem schema;
# sushy.BootSource). "Cd" is the virtual CD/DVD on BMCs with virtual media (sushy picks "UsbCd" on Supermicro).
BOOT_TARGETS = {"disk": "Hdd", "pxe": "Pxe", "virtual-media": "Cd"}
BOOT_MODES = ("UEFI", "Legacy")
# PCI class codes (PCI-SIG class/subclass) of a GPU-like function: VGA, 3D controller, other display controller,
# processing accelerator. hostfacts.GPU_CLASSES lists the same per vendor for sysfs.
GPU_PCI_CLASSES = ("0300", "0302", "0380", "1200")
RETRY_PAUSE_S = 0.5


class BmcError(RuntimeError):
    """A BMC or host operation failed; ``str()`` is one line, ``kind`` says which case (see the module doc)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
        self.kind = kind


def parse_address(address: str) -> str:
    """The Redfish base URL (``scheme://host[:port]``) of a BMC address: ``https://10.0.0.11``, ``http://bmc:8000``
    or a bare host (https). Credentials in the URL, paths other than the service root, queries: refused."""
    text = address.strip()
    if "://" not in text:
        text = "https://" + text
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise BmcError("invalid", f"BMC address {address!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise BmcError("invalid", f"BMC address {address!r}: scheme must be https or http, not {parts.scheme!r}")
    if parts.username is not None or parts.password is not None:
        raise BmcError("invalid", "BMC address: credentials do not belong in the URL (give username and password)")
    if not parts.hostname:
        raise BmcError("invalid", f"BMC address {address!r}: no host")
    if parts.path.rstrip("/") not in ("", "/redfish/v1") or parts.query or parts.fragment:
        raise BmcError("invalid", f"BMC address {address!r}: give the host (and port) only, not a path")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


@dataclass(frozen=True)
class Endpoint:
    """Where a BMC is and how to log in. ``retry_seconds``: how long a refused or reset connection is retried (a
    BMC's web server restarting); ``0`` fails at once."""

    address: str
    username: str
    password: str = field(repr=False)
    verify_tls: bool = True
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    retry_seconds: float = 0.0

    @property
    def url(self) -> str:
        return parse_address(self.address)


# -- what the BMC reports -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Processor:
    id: str
    type: str | None  # Redfish ProcessorType: CPU, GPU, FPGA, Accelerator...
    model: str | None
    manufacturer: str | None
    cores: int | None
    threads: int | None


@dataclass(frozen=True)
class PcieFunction:
    vendor_id: str | None  # "10de" (lowercase, no 0x)
    device_id: str | None
    class_code: str | None  # "030200"

    @property
    def pci_id(self) -> str | None:
        return f"{self.vendor_id}:{self.device_id}" if self.vendor_id and self.device_id else None

    @property
    def gpu_like(self) -> bool:
        return bool(self.class_code) and self.class_code[:4] in GPU_PCI_CLASSES  # type: ignore[index]


@dataclass(frozen=True)
class PcieDevice:
    id: str
    name: str | None
    manufacturer: str | None
    model: str | None
    functions: tuple[PcieFunction, ...]


@dataclass(frozen=True)
class BootOverride:
    target: str | None  # BootSourceOverrideTarget: Pxe, Hdd, Cd, None...
    enabled: str | None  # Once, Continuous, Disabled
    mode: str | None  # UEFI, Legacy
    allowed_targets: tuple[str, ...]  # BootSourceOverrideTarget@Redfish.AllowableValues (empty: not listed)


@dataclass(frozen=True)
class VirtualMedia:
    id: str
    media_types: tuple[str, ...]
    image: str | None
    inserted: bool


@dataclass(frozen=True)
class Inventory:
    """One ComputerSystem as its BMC describes it. ``processors`` / ``pcie_devices`` are None where the BMC lists
    none (unknown, not zero)."""

    system_id: str
    path: str
    uuid: str | None
    serial: str | None
    manufacturer: str | None
    model: str | None
    power: str  # Redfish PowerState: On, Off, PoweringOn, PoweringOff, Paused, Unknown
    cpu_count: int | None  # ProcessorSummary.Count
    memory_gib: float | None  # MemorySummary.TotalSystemMemoryGiB
    processors: tuple[Processor, ...] | None
    pcie_devices: tuple[PcieDevice, ...] | None
    macs: tuple[str, ...]
    boot: BootOverride
    reset_types: tuple[str, ...]
    virtual_media: tuple[VirtualMedia, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- sushy with gpufleet's retry and errors ------------------------------------------------------------------
def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and everything it wraps (cause, context, urllib3's ``reason``, exception arguments)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [x for x in (e.__cause__, e.__context__, getattr(e, "reason", None)) if isinstance(x, BaseException)]
        todo += [a for a in e.args if isinstance(a, BaseException)]


def _refused(exc: BaseException) -> bool:
    return any(isinstance(e, ConnectionRefusedError | ConnectionResetError) for e in _chain(exc))


def connection_reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words (refused, reset, name not resolved, TLS, timed out)."""
    found = list(_chain(exc))
    for kind, words in (
        (ConnectionRefusedError, "connection refused"),
        (ConnectionResetError, "connection reset"),
        (socket.gaierror, "host name not resolved"),
        (ssl.SSLCertVerificationError, "TLS certificate not trusted (verify_tls: false skips the check)"),
        (ssl.SSLError, "TLS handshake failed"),
        (TimeoutError, "timed out"),
        (OSError, None),
    ):
        for e in found:
            if isinstance(e, kind):
                return words or (e.strerror or str(e) or type(e).__name__)
    text = str(exc).lower()
    return "timed out" if "timed out" in text else "connection failed"


@functools.cache
def _connector_class() -> type:
    from sushy import connector, exceptions

    class RetryingConnector(connector.Connector):
        """sushy's connector, retrying a refused or reset connection for ``retry_seconds``."""

        retry_seconds = 0.0

        def _retrying(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            deadline = time.monotonic() + self.retry_seconds
            while True:
                try:
                    return call(*args, **kwargs)
                except exceptions.ConnectionError as exc:
                    if not _refused(exc) or time.monotonic() >= deadline:
                        raise
                    time.sleep(RETRY_PAUSE_S)

        def get(self, *args: Any, **kwargs: Any) -> Any:
            return self._retrying(super().get, *args, **kwargs)

        def post(self, *args: Any, **kwargs: Any) -> Any:
            return self._retrying(super().post, *args, **kwargs)

        def patch(self, *args: Any, **kwargs: Any) -> Any:
            return self._retrying(super().patch, *args, **kwargs)

        def put(self, *args: Any, **kwargs: Any) -> Any:
            return self._retrying(super().put, *args, **kwargs)

        def delete(self, *args: Any, **kwargs: Any) -> Any:
            return self._retrying(super().delete, *args, **kwargs)

    return RetryingConnector


def _enum(value: Any) -> str | None:
    """A sushy enum member (or a plain string) as its Redfish string."""
    if value is None:
        return None
    return str(getattr(value, "value", value))


def _boot_override(boot: Any) -> BootOverride:
    """sushy's Boot field (None where the system has no Boot object) as a :class:`BootOverride`."""
    if boot is None:
        return BootOverride(None, None, None, ())
    return BootOverride(_enum(boot.target), _enum(boot.enabled), _enum(boot.mode), tuple(boot.allowed_values or ()))


def _hex(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().lower()
    return text[2:] if text.startswith("0x") else text


class Bmc:
    """One BMC. Connects on first use; ``with Bmc(...) as bmc:`` closes its Redfish session at the end.
    ``poll_seconds``: how often a wait asks the BMC again."""

    def __init__(self, endpoint: Endpoint, poll_seconds: float = 1.0) -> None:
        self.endpoint = endpoint
        self.url = endpoint.url
        self.poll_seconds = poll_seconds
        self._root: sushy.Sushy | None = None
        self._auth: Any = None
        self._conn: Any = None
        self._systems_at: str | None = None

    def __enter__(self) -> Bmc:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the Redfish session (if the BMC gave one) and the HTTP session; a BMC gone meanwhile is no error
        (the session expires on its own)."""
        try:
            with self._errors("closing the session"):
                if self._auth is not None:
                    self._auth.close()
                if self._conn is not None:
                    self._conn.close()
        except BmcError:
            pass
        self._root = self._auth = self._conn = self._systems_at = None

    # -- errors ------------------------------------------------------------------------------------------
    def _scrub(self, text: str) -> str:
        """An error's text as one line (a BMC's message may span several), without the password."""
        secret = self.endpoint.password
        text = " ".join(text.split())
        return text.replace(secret, "***") if len(secret) >= 4 else text

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """sushy's and requests' exceptions as one :class:`BmcError` line naming the BMC and what was being done."""
        from sushy import exceptions as sx

        try:
            yield
        except BmcError as exc:
            raise BmcError(exc.kind, self._scrub(str(exc))) from None
        except sx.ConnectionError as exc:
            raise BmcError("unreachable", f"BMC {self.url} unreachable ({connection_reason(exc)})") from None
        except sx.AccessError as exc:
            why = "wrong user name or password" if exc.status_code == 401 else "not allowed for this user"
            msg = f"BMC {self.url} refused user {self.endpoint.username!r} {doing} (HTTP {exc.status_code}: {why})"
            raise BmcError("auth", self._scrub(msg)) from None
        except sx.ResourceNotFoundError as exc:
            raise BmcError("not-found", self._scrub(f"BMC {self.url}: {doing}: {exc}")) from None
        except sx.MissingActionError as exc:
            raise BmcError("unsupported", self._scrub(f"BMC {self.url}: {doing}: {exc}")) from None
        except sx.HTTPError as exc:
            detail = exc.detail or exc.code or ""
            msg = f"BMC {self.url}: {doing} failed: HTTP {exc.status_code} {detail}"
            raise BmcError("failed", self._scrub(msg)) from None
        except sx.SushyError as exc:
            raise BmcError("failed", self._scrub(f"BMC {self.url}: {doing} failed: {exc}")) from None

    # -- service and systems -----------------------------------------------------------------------------
    def _service(self) -> sushy.Sushy:
        if self._root is not None:
            return self._root
        import sushy
        from sushy import auth

        ep = self.endpoint
        conn = _connector_class()(
            self.url,
            verify=ep.verify_tls,
            server_side_retries=1,  # one attempt per connection (gpufleet retries refused ones), one 5xx retry
            server_side_retries_delay=1,
            default_request_timeout=ep.read_timeout,
            connect_timeout=ep.connect_timeout,
        )
        conn.retry_seconds = ep.retry_seconds
        session = auth.SessionOrBasicAuth(username=ep.username, password=ep.password)
        with self._errors("logging in"):
            root = sushy.Sushy(self.url, auth=session, connector=conn)
            root.get_system_collection()  # the service root answers anyone: this is the first authenticated GET
        self._root, self._auth, self._conn = root, session, conn
        return root

    def _systems_path(self) -> str:
        if self._systems_at is None:
            with self._errors("listing systems"):
                self._systems_at = str(self._service().get_system_collection().path).rstrip("/")
        return self._systems_at

    def system_ids(self) -> list[str]:
        """The Ids of the ComputerSystems the BMC manages."""
        with self._errors("listing systems"):
            members = self._service().get_system_collection().members_identities
        return [m.rstrip("/").rsplit("/", 1)[-1] for m in members]

    def _system(self, system_id: str) -> Any:
        path = system_id if system_id.startswith("/") else f"{self._systems_path()}/{system_id}"
        try:
            with self._errors(f"reading system {system_id}"):
                return self._service().get_system(path)
        except BmcError as exc:
            if exc.kind != "not-found":
                raise
            have = ", ".join(self.system_ids()) or "none"
            raise BmcError("not-found", f"BMC {self.url} has no system {system_id!r} (its systems: {have})") from None

    def find_system(self, system_id: str | None = None, serial: str | None = None) -> str:
        """The Id of the system named by ``system_id`` and/or ``serial`` (its SerialNumber). With both, the system's
        serial must be ``serial`` (``mismatch`` otherwise); with the serial alone, exactly one system has it."""
        if system_id:
            system = self._system(system_id)
            found = (system.serial_number or "").strip() or None
            if serial and found != serial.strip():
                have = f"serial {found!r}" if found else "no SerialNumber"
                raise BmcError(
                    "mismatch", f"system {system_id} at {self.url} reports {have}; expected serial {serial!r}"
                )
            return str(system.identity)
        if not serial:
            raise BmcError("invalid", "a system id or a serial number is needed to find the system")
        seen: dict[str, str | None] = {}
        for sid in self.system_ids():
            seen[sid] = (self._system(sid).serial_number or "").strip() or None
        matches = [sid for sid, sn in seen.items() if sn == serial.strip()]
        if len(matches) == 1:
            return matches[0]
        listed = ", ".join(f"{sid}: {sn or 'no serial'}" for sid, sn in seen.items()) or "no systems"
        if not matches:
            raise BmcError("not-found", f"no system with serial {serial!r} at {self.url} ({listed})")
        raise BmcError("mismatch", f"{len(matches)} systems with serial {serial!r} at {self.url} ({listed})")

    # -- inventory ---------------------------------------------------------------------------------------
    def inventory(self, system_id: str, devices: bool = True) -> Inventory:
        """What the BMC says about the system: identity, power, processors, memory, PCIe devices, NICs, boot
        override (with its allowed targets), reset types, virtual media. ``devices=False`` leaves out processors,
        PCIe devices and NICs (a request per device; None and () then)."""
        system = self._system(system_id)
        with self._errors(f"reading system {system_id}"):
            summary = system.json.get("ProcessorSummary") or {}
            return Inventory(
                system_id=str(system.identity),
                path=str(system.path),
                uuid=system.uuid,
                serial=(system.serial_number or "").strip() or None,
                manufacturer=system.manufacturer,
                model=system.model,
                power=_enum(system.power_state) or "Unknown",
                cpu_count=summary.get("Count") if isinstance(summary.get("Count"), int) else None,
                memory_gib=system.memory_summary.size_gib if system.memory_summary else None,
                processors=self._processors(system) if devices else None,
                pcie_devices=self._pcie_devices(system) if devices else None,
                macs=self._macs(system) if devices else (),
                boot=_boot_override(system.boot),
                reset_types=self._reset_types(system),
                virtual_media=tuple(self._media_view(m) for m in self._media(system)),
            )

    def refresh(self, inv: Inventory) -> Inventory:
        """``inv`` with what changes while a box stays the same box read again: power state, boot override, reset
        types, virtual media (the processor and PCIe walk of :meth:`inventory` costs a request per device)."""
        system = self._system(inv.system_id)
        with self._errors(f"reading system {inv.system_id}"):
            return replace(
                inv,
                power=_enum(system.power_state) or "Unknown",
                boot=_boot_override(system.boot),
                reset_types=self._reset_types(system),
                virtual_media=tuple(self._media_view(m) for m in self._media(system)),
            )

    def _optional(self, read: Callable[[], Any], default: Any) -> Any:
        """A part of the inventory some BMCs do not offer: ``default`` when it is missing or unreadable."""
        from sushy import exceptions as sx

        try:
            return read()
        except (sx.MissingAttributeError, sx.ResourceNotFoundError, sx.MalformedAttributeError):
            return default
        except sx.HTTPError as exc:
            if exc.status_code in (401, 403):
                raise
            return default

    def _processors(self, system: Any) -> tuple[Processor, ...] | None:
        def read() -> tuple[Processor, ...]:
            return tuple(
                Processor(
                    id=str(p.identity),
                    type=_enum(p.processor_type),
                    model=p.model,
                    manufacturer=p.manufacturer,
                    cores=p.total_cores,
                    threads=p.total_threads,
                )
                for p in system.processors.get_members()
            )

        return self._optional(read, None) or None

    def _pcie_devices(self, system: Any) -> tuple[PcieDevice, ...] | None:
        def functions(device: Any) -> tuple[PcieFunction, ...]:
            return tuple(
                PcieFunction(_hex(f.vendor_id), _hex(f.device_id), _hex(f.class_code))
                for f in device.pcie_functions.get_members()
            )

        def read() -> tuple[PcieDevice, ...]:
            return tuple(
                PcieDevice(
                    id=str(d.identity),
                    name=d.name,
                    manufacturer=d.manufacturer,
                    model=d.model,
                    functions=self._optional(lambda d=d: functions(d), ()),
                )
                for d in system.pcie_devices.get_members()
            )

        return self._optional(read, None) or None

    def _macs(self, system: Any) -> tuple[str, ...]:
        def read() -> tuple[str, ...]:
            return tuple(str(n.mac_address).lower() for n in system.ethernet_interfaces.get_members() if n.mac_address)

        return self._optional(read, ())

    def _reset_types(self, system: Any) -> tuple[str, ...]:
        action = (system.json.get("Actions") or {}).get("#ComputerSystem.Reset") or {}
        listed = action.get("ResetType@Redfish.AllowableValues")
        if isinstance(listed, list):
            return tuple(str(v) for v in listed)
        # no inline list: sushy reads the action's ActionInfo (or, lacking one, assumes every reset type)
        return tuple(sorted(str(_enum(v)) for v in self._optional(system.get_allowed_reset_system_values, set())))

    def _media(self, system: Any) -> list[Any]:
        """The system's virtual media slots: under the system (Redfish 1.x newer BMCs) or its managers."""

        def under_system() -> list[Any]:
            return list(system.virtual_media.get_members())

        def under_managers() -> list[Any]:
            return [m for manager in system.managers for m in manager.virtual_media.get_members()]

        if "VirtualMedia" in system.json:
            return self._optional(under_system, [])
        return self._optional(under_managers, [])

    @staticmethod
    def _media_view(slot: Any) -> VirtualMedia:
        return VirtualMedia(
            id=str(slot.identity),
            media_types=tuple(str(_enum(t)) for t in (slot.media_types or ())),
            image=slot.image or None,
            inserted=bool(slot.inserted),
        )

    # -- actions -----------------------------------------------------------------------------------------
    def power_state(self, system_id: str) -> str:
        system = self._system(system_id)
        with self._errors(f"reading the power state of system {system_id}"):
            return _enum(system.power_state) or "Unknown"

    def reset(self, system_id: str, reset_type: str) -> None:
        """``ComputerSystem.Reset`` with ``reset_type`` (On, ForceOff, GracefulShutdown...), if the system allows
        it (``unsupported`` lists what it allows)."""
        import sushy

        system = self._system(system_id)
        allowed = self._reset_types(system)
        if reset_type not in allowed:
            raise BmcError(
                "unsupported",
                f"system {system_id} at {self.url} does not allow reset {reset_type!r}; allowed: "
                + (", ".join(allowed) or "none"),
            )
        with self._errors(f"reset {reset_type} of system {system_id}"):
            try:
                value = sushy.ResetType(reset_type)
            except ValueError:
                raise BmcError("unsupported", f"sushy knows no reset type {reset_type!r}") from None
            system.reset_system(value)

    def wait_power(
        self, system_id: str, state: str, timeout: float, progress: Progress | None = None, doing: str = ""
    ) -> float:
        """Seconds until the system's PowerState is ``state``; ``timeout`` otherwise."""
        start = time.monotonic()
        last = ""
        while True:
            now = self.power_state(system_id)
            elapsed = time.monotonic() - start
            if now == state:
                return elapsed
            if elapsed >= timeout:
                what = f" after {doing}" if doing else ""
                raise BmcError(
                    "timeout", f"system {system_id} at {self.url} is {now}, not {state}, {timeout:.0f} s{what}"
                )
            if progress and now != last:
                progress(f"system {system_id}: power {now}, waiting for {state}")
            last = now
            time.sleep(self.poll_seconds)

    def power_on(self, system_id: str, timeout: float, progress: Progress | None = None) -> bool:
        """Power the system on (``On``, else ``ForceOn``) and wait; False when it already was."""
        system = self._system(system_id)
        state = _enum(system.power_state)
        if state == "On":
            return False
        if state == "PoweringOn":
            self.wait_power(system_id, "On", timeout, progress, "powering on")
            return True
        allowed = self._reset_types(system)
        kind = "On" if "On" in allowed or "ForceOn" not in allowed else "ForceOn"
        if progress:
            progress(f"system {system_id}: reset {kind}")
        self.reset(system_id, kind)
        self.wait_power(system_id, "On", timeout, progress, f"reset {kind}")
        return True

    def power_off(
        self, system_id: str, graceful_timeout: float, timeout: float, progress: Progress | None = None
    ) -> str:
        """Power the system off: ``GracefulShutdown`` (the OS shuts down) and, when it is still on after
        ``graceful_timeout``, ``ForceOff``. Returns ``already off``, ``graceful`` or ``forced``."""
        system = self._system(system_id)
        state = _enum(system.power_state)
        if state == "Off":
            return "already off"
        graceful = None  # what the graceful wait is for: a shutdown already under way, or one asked for here
        if state == "PoweringOff":
            graceful = "powering off"
        elif "GracefulShutdown" in self._reset_types(system):
            if progress:
                progress(f"system {system_id}: reset GracefulShutdown (ForceOff after {graceful_timeout:.0f} s)")
            self.reset(system_id, "GracefulShutdown")
            graceful = "GracefulShutdown"
        if graceful is not None:
            try:
                self.wait_power(system_id, "Off", graceful_timeout, progress, graceful)
                return "graceful"
            except BmcError as exc:
                if exc.kind != "timeout":
                    raise
        if progress:
            progress(f"system {system_id}: reset ForceOff")
        self.reset(system_id, "ForceOff")
        self.wait_power(system_id, "Off", timeout, progress, "ForceOff")
        return "forced"

    def power_cycle(self, system_id: str, timeout: float, progress: Progress | None = None) -> None:
        """Cut the system's power and give it back: ``ForceOff``, then ``On`` (``ForceOn`` where only that is
        allowed), waiting for each. Unlike a reboot, the devices lose power too: what a GPU that fell off its PCIe
        bus needs (docs/remediation.md)."""
        if _enum(self._system(system_id).power_state) != "Off":
            if progress:
                progress(f"system {system_id}: reset ForceOff")
            self.reset(system_id, "ForceOff")
            self.wait_power(system_id, "Off", timeout, progress, "ForceOff")
        self.power_on(system_id, timeout, progress)

    def set_boot_override(self, system_id: str, target: str, mode: str = "UEFI", once: bool = True) -> str | None:
        """Boot ``target`` (Pxe, Hdd, Cd...) at the next boot (``once``) or every boot, in ``mode``. A target or
        mode the system does not list in its AllowableValues is refused before anything is sent.

        The mode is sent only when the system reports another one: a BMC that reports none (sushy-emulator's
        libvirt driver for a BIOS guest) would rewrite the machine's firmware for it. Returns the mode sent (None:
        left as it was)."""
        import sushy

        system = self._system(system_id)
        with self._errors(f"reading the boot settings of system {system_id}"):
            allowed = tuple(system.boot.allowed_values or ()) if system.boot else ()
            modes = (system.json.get("Boot") or {}).get("BootSourceOverrideMode@Redfish.AllowableValues") or ()
            current = _enum(system.boot.mode) if system.boot else None
        if allowed and target not in allowed:
            raise BmcError(
                "unsupported",
                f"system {system_id} at {self.url} cannot boot {target!r} (BootSourceOverrideTarget allows: "
                f"{', '.join(allowed)})",
            )
        if modes and mode not in modes:
            raise BmcError(
                "unsupported",
                f"system {system_id} at {self.url} has no boot mode {mode!r} (allowed: {', '.join(modes)})",
            )
        send = mode if current is not None and current != mode else None
        with self._errors(f"setting the boot override of system {system_id} to {target} ({mode})"):
            system.set_system_boot_options(
                target=sushy.BootSource(target),
                enabled=sushy.BootSourceOverrideEnabled("Once" if once else "Continuous"),
                mode=sushy.BootSourceOverrideMode(send) if send else None,
            )
        return send

    def _cd_slot(self, system_id: str) -> Any:
        system = self._system(system_id)
        slots = self._media(system)
        for slot in slots:
            if {str(_enum(t)) for t in (slot.media_types or ())} & {"CD", "DVD"}:
                return slot
        listed = ", ".join(f"{s.identity} ({'/'.join(str(_enum(t)) for t in s.media_types or ())})" for s in slots)
        raise BmcError(
            "unsupported",
            f"system {system_id} at {self.url} has no virtual CD/DVD drive (virtual media: {listed or 'none'})",
        )

    def insert_media(self, system_id: str, image_url: str) -> VirtualMedia:
        """Insert ``image_url`` into the system's virtual CD/DVD (ejecting another image first); no change when it
        is already in. Returns the slot as the BMC reports it afterwards."""
        slot = self._cd_slot(system_id)
        with self._errors(f"inserting virtual media into system {system_id}"):
            if slot.inserted and slot.image == image_url:
                return self._media_view(slot)
            if slot.inserted:
                slot.eject_media()
            slot.insert_media(image_url, inserted=True, write_protected=True)
            slot.refresh()
            view = self._media_view(slot)
        if not view.inserted or view.image != image_url:
            raise BmcError("failed", f"system {system_id}: the BMC did not insert {image_url} (slot {view.id})")
        return view

    def eject_media(self, system_id: str, image_url: str | None = None) -> list[str]:
        """Eject inserted virtual media (only ``image_url`` when given); the slots ejected."""
        system = self._system(system_id)
        ejected = []
        with self._errors(f"ejecting virtual media of system {system_id}"):
            for slot in self._media(system):
                if slot.inserted and (image_url is None or slot.image == image_url):
                    slot.eject_media()
                    ejected.append(str(slot.identity))
        return ejected

    def erasable_drives(self, system_id: str) -> list[tuple[str, str]]:
        """(drive, ``Drive.SecureErase`` target) for every drive of the system, if every one offers the action;
        ``unsupported`` naming those that do not (or saying the BMC lists no drives) otherwise."""
        system = self._system(system_id)
        drives: list[tuple[str, str | None]] = []

        def read() -> None:
            for storage in system.storage.get_members():
                for drive in storage.drives:
                    action = (drive.json.get("Actions") or {}).get("#Drive.SecureErase") or {}
                    drives.append((f"{storage.identity}/{drive.identity}", action.get("target")))

        with self._errors(f"reading the drives of system {system_id}"):
            self._optional(read, None)
        if not drives:
            raise BmcError(
                "unsupported", f"cannot wipe the disks of system {system_id} through Redfish: the BMC lists no drives"
            )
        lacking = [name for name, target in drives if not target]
        if lacking:
            raise BmcError(
                "unsupported",
                f"cannot wipe the disks of system {system_id} through Redfish: drive {', '.join(lacking)} offers no"
                " Drive.SecureErase (wipe them another way, e.g. Ironic cleaning, or set wipe_disks_on_delete: false)",
            )
        return [(name, str(target)) for name, target in drives]

    def wipe_disks(self, system_id: str, timeout: float, progress: Progress | None = None) -> list[str]:
        """``Drive.SecureErase`` on every drive (refused before any erase when one lacks it); waits for the BMC's
        task when it answers 202. The drives erased."""
        drives = self.erasable_drives(system_id)
        for name, target in drives:
            if progress:
                progress(f"system {system_id}: Drive.SecureErase {name}")
            with self._errors(f"erasing drive {name} of system {system_id}"):
                self._conn.post(target, data={}, blocking=True, timeout=timeout)
        return [name for name, _ in drives]


# -- the host once it runs ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SshTarget:
    """Where the booted host's SSH answers. ``known_hosts_file`` None: a host just (re)installed has a new host key,
    so it is not checked (as a first Ansible run with host_key_checking off)."""

    address: str
    port: int = 22
    user: str = "root"
    private_key_path: str | None = None
    known_hosts_file: str | None = None

    def command(self, remote: str, connect_timeout: int = 10) -> list[str]:
        """The ``ssh`` argument list that runs ``remote`` on the host (key auth only, no prompts)."""
        if not self.private_key_path:
            raise BmcError("invalid", f"{self.address}: no SSH private key to log in with")
        check = (
            ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={self.known_hosts_file}"]
            if self.known_hosts_file
            else ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
        )
        return [
            "ssh", *check, "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={connect_timeout}",
            "-i", self.private_key_path, "-p", str(self.port), f"{self.user}@{self.address}", remote,
        ]  # fmt: skip


def ssh_answers(address: str, port: int, timeout: float = 5.0) -> bool:
    """An SSH server answers at address:port: it accepts a TCP connection and sends its ``SSH-`` banner."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def wait_for_ssh(
    address: str, port: int, timeout: float, progress: Progress | None = None, interval: float = 2.0
) -> float:
    """Seconds until SSH answers at address:port (:func:`ssh_answers`); ``timeout`` after ``timeout`` seconds.
    ``progress`` hears of the wait every ~30 s (and once at the start)."""
    start = time.monotonic()
    told = -1.0
    while True:
        if ssh_answers(address, port, timeout=min(5.0, max(interval, 0.5))):
            return time.monotonic() - start
        elapsed = time.monotonic() - start
        if elapsed >= timeout:
            raise BmcError("timeout", f"no SSH on {address}:{port} after {timeout:.0f} s")
        if progress and (told < 0 or elapsed - told >= 30):
            progress(f"waiting for SSH on {address}:{port} ({elapsed:.0f} s of {timeout:.0f} s)")
            told = elapsed
        time.sleep(interval)


@dataclass(frozen=True)
class HostDevice:
    pci: str  # the PCI address on the host (0000:17:00.0)
    pci_id: str  # vendor:device (10de:2330)
    numa_node: int | None
    model: str | None = None  # the catalog GPU model, for GPUs
    sriov_totalvfs: int = 0


@dataclass(frozen=True)
class HostFacts:
    """The running host's topology as :func:`gpufleet.host.hostfacts.read_host` reads it (the facts the Ansible roles
    and the topology planner use), summed up."""

    numa_nodes: int
    cpus: int
    cores: int
    memory_gib: float  # what the kernel sees (MemTotal): a little under the installed memory
    gpus: tuple[HostDevice, ...]
    sriov_devices: tuple[HostDevice, ...]
    nics: tuple[HostDevice, ...]
    kernel: str | None

    @classmethod
    def from_hostfacts(cls, facts: dict[str, Any]) -> HostFacts:
        def dev(d: dict[str, Any]) -> HostDevice:
            return HostDevice(
                pci=d["pci"],
                pci_id=f"{d['vendor']}:{d['device']}",
                numa_node=d.get("numa_node"),
                model=d.get("model"),
                sriov_totalvfs=int(d.get("sriov_totalvfs") or 0),
            )

        return cls(
            numa_nodes=len(facts["numa_nodes"]),
            cpus=sum(len(n["cpus"]) for n in facts["numa_nodes"]),
            cores=len(facts["cores"]),
            memory_gib=round(facts["memory_kib"] / 1024**2, 2),
            gpus=tuple(dev(d) for d in facts.get("gpus", [])),
            sriov_devices=tuple(dev(d) for d in facts.get("sriov_devices", [])),
            nics=tuple(dev(d) for d in facts.get("nics", [])),
            kernel=facts.get("kernel"),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def facts_script(gpu_catalog: dict[str, Any]) -> str:
    """A self-contained Python script printing the host's facts as JSON: gpufleet/host/hostfacts.py (stdlib only, the
    file the Ansible module ships) and a call of its ``read_host``."""
    from gpufleet.host import hostfacts

    source = Path(hostfacts.__file__).read_text()
    catalog = json.dumps(json.dumps(gpu_catalog))  # a Python string literal holding the JSON
    return source + f"\nimport json as _j\nprint(_j.dumps(read_host('/', _j.loads({catalog}))))\n"


def run_facts_script(argv: list[str], script: str, timeout: float) -> dict[str, Any]:
    """Run ``argv`` (``ssh ... python3 -``, or a local ``python3 -``) with ``script`` on its stdin; its JSON."""
    try:
        done = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise BmcError("timeout", f"reading host facts ({argv[0]}) took over {timeout:.0f} s") from None
    except OSError as exc:
        raise BmcError("failed", f"reading host facts: cannot run {argv[0]}: {exc.strerror}") from None
    if done.returncode:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise BmcError("failed", f"reading host facts with {argv[0]} failed: {last}")
    try:
        return json.loads(done.stdout)
    except ValueError:
        raise BmcError("failed", f"reading host facts with {argv[0]}: the output is not JSON") from None


def read_host_facts(target: SshTarget, gpu_catalog: dict[str, Any], timeout: float = 120) -> HostFacts:
    """The host's facts, read over SSH by the host's own python3 (as Ansible runs its modules)."""
    facts = run_facts_script(target.command("python3 -"), facts_script(gpu_catalog), timeout)
    return HostFacts.from_hostfacts(facts)


# -- is this the box we were told about? ------------------------------------------------------------------------
@dataclass(frozen=True)
class ExpectedHardware:
    """What the stack says the box has; None: not checked."""

    gpu_model: str | None = None  # a catalog GPU (canonical name, PCI id or nvidia-smi name)
    gpu_count: int | None = None
    numa_nodes: int | None = None
    memory_gib: float | None = None  # installed memory


# How far reported memory may be from the expected installed figure: a BMC reports the installed DIMMs (within a
# rounding), the kernel's MemTotal leaves out what firmware and the kernel keep (a few percent; more on small VMs).
BMC_MEMORY_TOLERANCE = 0.03
OS_MEMORY_RANGE = (0.85, 1.01)


@dataclass(frozen=True)
class GpuSeen:
    model: str | None  # the catalog's canonical name, None when the catalog does not know it
    reported: str  # how the BMC or host named it (model string or PCI id)


def redfish_gpus(inv: Inventory, lookup: Callable[[str], str | None]) -> tuple[GpuSeen, ...] | None:
    """The GPUs the BMC lists: Processors of type GPU, else GPU-class PCIe functions. None when it lists neither
    processors of type GPU nor any PCIe device (many BMCs list only CPUs): unknown, not zero."""
    by_processor = [p for p in inv.processors or () if (p.type or "").upper() == "GPU"]
    if by_processor:
        return tuple(GpuSeen(lookup(p.model or ""), p.model or p.id) for p in by_processor)
    if not inv.pcie_devices:
        return None
    found = []
    for device in inv.pcie_devices:
        for fn in device.functions:
            model = lookup(fn.pci_id) if fn.pci_id else None
            if fn.gpu_like or model:
                found.append(GpuSeen(model, fn.pci_id or device.model or device.id))
    return tuple(found)


def _gpu_difference(expected: ExpectedHardware, seen: tuple[GpuSeen, ...], canonical: str | None) -> list[str]:
    out = []
    if expected.gpu_count is not None and len(seen) != expected.gpu_count:
        out.append(f"{len(seen)} GPUs (expected {expected.gpu_count})")
    if canonical:
        other = sorted({g.model or f"unknown ({g.reported})" for g in seen} - {canonical})
        if other:
            out.append(f"GPU model {', '.join(other)} (expected {canonical})")
    return out


def hardware_differences(
    expected: ExpectedHardware,
    lookup: Callable[[str], str | None],
    inv: Inventory | None = None,
    facts: HostFacts | None = None,
) -> tuple[list[str], list[str]]:
    """(differences, unverified): how the box differs from ``expected`` by what the BMC (``inv``) and the running
    host (``facts``) report, and the expected items neither could check. ``lookup`` resolves a GPU identifier to
    the catalog's canonical name (None if unknown)."""
    diffs: list[str] = []
    unverified: list[str] = []
    canonical = (lookup(expected.gpu_model) or expected.gpu_model) if expected.gpu_model else None
    want_gpus = expected.gpu_model is not None or expected.gpu_count is not None
    bmc_gpus = redfish_gpus(inv, lookup) if inv else None
    if want_gpus and facts is not None:
        diffs += _gpu_difference(expected, tuple(GpuSeen(g.model, g.pci_id) for g in facts.gpus), canonical)
    elif want_gpus and bmc_gpus is not None:
        diffs += _gpu_difference(expected, bmc_gpus, canonical)
    elif want_gpus:
        unverified.append("GPUs: the BMC lists none and no host facts were read")
    if expected.memory_gib is not None:
        want = expected.memory_gib
        if inv is not None and inv.memory_gib is not None:
            if abs(inv.memory_gib - want) > BMC_MEMORY_TOLERANCE * want:
                diffs.append(f"{inv.memory_gib:g} GiB of memory (expected {want:g} GiB)")
        elif facts is None:
            unverified.append("memory: the BMC reports none and no host facts were read")
        if facts is not None and not OS_MEMORY_RANGE[0] * want <= facts.memory_gib <= OS_MEMORY_RANGE[1] * want:
            diffs.append(f"{facts.memory_gib:g} GiB of memory seen by the OS (expected {want:g} GiB installed)")
    if expected.numa_nodes is not None:
        if facts is None:
            unverified.append("NUMA nodes: Redfish does not report them and no host facts were read")
        elif facts.numa_nodes != expected.numa_nodes:
            diffs.append(f"{facts.numa_nodes} NUMA nodes (expected {expected.numa_nodes})")
    return diffs, unverified


def mac_difference(boot_mac: str | None, inv: Inventory) -> str | None:
    """The boot NIC is not among the system's NICs (when the BMC lists them)."""
    if not boot_mac or not inv.macs:
        return None
    if boot_mac.lower() in inv.macs:
        return None
    return f"no NIC with MAC {boot_mac.lower()} (NICs: {', '.join(inv.macs)})"


def catalog_lookup() -> Callable[[str], str | None]:
    """GPU identifier -> the catalog's canonical name (None when unknown)."""
    from gpufleet.catalog import load_catalog

    catalog = load_catalog()

    def lookup(identifier: str) -> str | None:
        gpu = catalog.find_gpu(identifier) if identifier else None
        return gpu.name if gpu else None

    return lookup


__all__ = [
    "BOOT_MODES",
    "BOOT_TARGETS",
    "Bmc",
    "BmcError",
    "BootOverride",
    "Endpoint",
    "ExpectedHardware",
    "GpuSeen",
    "HostDevice",
    "HostFacts",
    "Inventory",
    "PcieDevice",
    "PcieFunction",
    "Processor",
    "SshTarget",
    "VirtualMedia",
    "catalog_lookup",
    "hardware_differences",
    "mac_difference",
    "parse_address",
    "read_host_facts",
    "redfish_gpus",
    "run_facts_script",
    "ssh_answers",
    "wait_for_ssh",
]
