"""``BareMetalHost``: one BMC-managed server as a Pulumi resource (a dynamic provider), the way metal3/Ironic treat
a host, driven through Redfish by :mod:`gpufleet.baremetal.bmc` (sushy).

- **create** claims the system (found by Redfish id and/or SerialNumber; the serial, the boot NIC's MAC and the
  expected hardware checked against the BMC's inventory, and a wrong box refused with the difference spelled out
  before anything changes), then, when the host is to be on and is off: inserts the virtual media image (boot
  source ``virtual-media``), sets the one-time boot override (``Pxe``/``Hdd``/``Cd``, UEFI), powers it on, waits
  for SSH and, given a key, reads the host's facts over SSH (:mod:`gpufleet.host.hostfacts`) and checks them too. A host
  that is already on keeps running: the boot settings apply when gpufleet next powers it on.
- **diff**: power, boot, SSH, group and credential changes are updates in place; the BMC address, system id,
  serial, boot MAC or expected hardware changing means another box: replacement (delete first).
- **update** powers on (with the boot settings) or off (graceful, then forced).
- **delete** powers off (``GracefulShutdown``, ``ForceOff`` after a timeout), ejects the image it inserted and,
  with ``wipe_disks_on_delete``, erases every drive with Redfish ``Drive.SecureErase`` (refused before anything
  changes when a drive lacks the action, or the BMC lists no drives).
- **read** refreshes power state, boot override and virtual media from the BMC: ``pulumi refresh`` shows a host
  powered off by hand as ``power: off`` and the next ``pulumi up`` powers it on again.

Credentials: the password is the resource's ``password`` input, a Pulumi secret (``additional_secret_outputs``),
used by create/update/diff; no output, ID or message holds it. Delete and read get only the resource's outputs,
so the provider reads the password from the stack's configuration (``ResourceProvider.configure``, pulumi PR
#17673, older than the pulumi this project requires) under ``bmc_password_key`` (``gpufleet:bmc_password``): the
key, never the value, is kept in the state.

Mapping from the stack's ``gpufleet:baremetal.hosts[]`` (gpufleet.spec): ``name``, ``host_group`` as they are;
``bmc.address/username/verify_tls`` -> ``bmc_address/bmc_username/bmc_verify_tls``; ``bmc.password: {secret: KEY}``
-> ``bmc_password_key=KEY`` and ``password=pulumi.Config(ns).require_secret(name)``; ``system_id``, ``serial``,
``power``, ``boot_mac``, ``wipe_disks_on_delete`` as they are; ``boot: {mode, source, image_url, image_checksum}``
-> :class:`BootSpec`; ``ssh: {address, port}`` -> :class:`SshSpec` (plus ``user``/``private_key_path`` to read
facts); ``expected: {gpu_model, gpu_count, numa_nodes, memory_gib}`` ->
:class:`gpufleet.baremetal.bmc.ExpectedHardware`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    ConfigureRequest,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)
from pulumi.runtime import rpc

from gpufleet.baremetal.bmc import (
    BOOT_MODES,
    BOOT_TARGETS,
    Bmc,
    BmcError,
    Endpoint,
    ExpectedHardware,
    HostFacts,
    Inventory,
    SshTarget,
    catalog_lookup,
    hardware_differences,
    mac_difference,
    parse_address,
    read_host_facts,
    redfish_gpus,
    wait_for_ssh,
)

POWER_STATES = ("on", "off")
# A change of these is another box: replacement, the old resource deleted first (one box cannot be two hosts).
REPLACE_ON = ("bmc_address", "system_id", "serial", "boot_mac", "expected")
IN_PLACE = ("name", "host_group", "bmc_username", "bmc_password_key", "bmc_verify_tls", "boot", "power", "ssh")
IN_PLACE += ("wipe_disks_on_delete", "timeouts")
# What create/update/read add to the inputs (the inputs' ``power`` becomes the observed power state).
OUTPUTS = ("resolved_system_id", "system_path", "facts", "observed", "unverified")
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_CHECKSUM = re.compile(r"^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}|md5:[0-9a-f]{32})$")


@dataclass(frozen=True)
class BootSpec:
    source: str = "disk"  # disk | pxe | virtual-media
    mode: str = "UEFI"
    image_url: str | None = None  # virtual-media: the image the BMC mounts
    image_checksum: str | None = None  # sha256:<hex> (recorded; the BMC does not check it)


@dataclass(frozen=True)
class SshSpec:
    address: str
    port: int = 22
    user: str = "root"
    private_key_path: str | None = None  # set: the host's facts are read over SSH once it answers
    known_hosts_file: str | None = None


@dataclass(frozen=True)
class Timeouts:
    power_s: float = 300  # a power transition, and ForceOff
    graceful_off_s: float = 300  # GracefulShutdown before ForceOff
    ssh_s: float = 1800  # power-on to SSH (an image install over PXE takes a while)
    facts_s: float = 120
    wipe_s: float = 3600  # the BMC's SecureErase task
    bmc_retry_s: float = 30  # a refused connection (the BMC's web server restarting)
    bmc_read_s: float = 60  # one answer of the BMC (a response that stops half way fails after it)
    poll_s: float = 2.0


@dataclass(frozen=True)
class HostInputs:
    """The resource's inputs, typed (the password is not among them: it is a secret input of its own)."""

    name: str  # the Ansible inventory hostname
    host_group: str
    bmc_address: str
    bmc_username: str
    bmc_password_key: str | None = None  # the stack config key holding the password (gpufleet:bmc_password)
    bmc_verify_tls: bool = True
    system_id: str | None = None
    serial: str | None = None
    boot: BootSpec = field(default_factory=BootSpec)
    power: str = "on"
    ssh: SshSpec | None = None
    boot_mac: str | None = None
    expected: ExpectedHardware = field(default_factory=ExpectedHardware)
    wipe_disks_on_delete: bool = False
    timeouts: Timeouts = field(default_factory=Timeouts)

    def to_props(self) -> dict[str, Any]:
        return _plain(asdict(self))

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> HostInputs:
        """The inputs from a property bag (the resource's inputs or outputs: numbers come back as floats)."""
        try:
            ssh = props.get("ssh")
            return cls(
                name=str(props["name"]),
                host_group=str(props["host_group"]),
                bmc_address=str(props["bmc_address"]),
                bmc_username=str(props["bmc_username"]),
                bmc_password_key=_opt_str(props.get("bmc_password_key")),
                bmc_verify_tls=bool(props.get("bmc_verify_tls", True)),
                system_id=_opt_str(props.get("system_id")),
                serial=_opt_str(props.get("serial")),
                boot=_typed(BootSpec, props.get("boot")),
                power=str(props.get("power") or "on"),
                ssh=_typed(SshSpec, ssh, ints=("port",)) if ssh else None,
                boot_mac=_opt_str(props.get("boot_mac")),
                expected=_typed(ExpectedHardware, props.get("expected"), ints=("gpu_count", "numa_nodes")),
                wipe_disks_on_delete=bool(props.get("wipe_disks_on_delete", False)),
                timeouts=_typed(Timeouts, props.get("timeouts")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            who = props.get("name") or "bare-metal host"
            raise BmcError("invalid", f"{who}: inputs unusable ({type(exc).__name__}: {exc})") from None

    def problems(self) -> list[tuple[str, str]]:
        """(property, reason) for every input gpufleet cannot act on."""
        out = []
        try:
            parse_address(self.bmc_address)
        except BmcError as exc:
            out.append(("bmc_address", str(exc)))
        if not (self.system_id or self.serial):
            out.append(("system_id", "give the Redfish system id, the serial number, or both"))
        if self.power not in POWER_STATES:
            out.append(("power", f"{self.power!r}: one of {', '.join(POWER_STATES)}"))
        if self.boot.source not in BOOT_TARGETS:
            out.append(("boot.source", f"{self.boot.source!r}: one of {', '.join(BOOT_TARGETS)}"))
        if self.boot.mode not in BOOT_MODES:
            out.append(("boot.mode", f"{self.boot.mode!r}: one of {', '.join(BOOT_MODES)}"))
        if self.boot.source == "virtual-media" and not re.match(r"^https?://", self.boot.image_url or ""):
            out.append(("boot.image_url", "virtual-media needs the image's http(s) URL"))
        if self.boot.image_checksum and not _CHECKSUM.match(self.boot.image_checksum):
            out.append(("boot.image_checksum", "sha256:<64 hex digits> (or sha512:, md5:)"))
        if self.boot_mac and not _MAC.match(self.boot_mac.lower()):
            out.append(("boot_mac", f"{self.boot_mac!r} is not a MAC address (aa:bb:cc:dd:ee:ff)"))
        if self.ssh and not 0 < self.ssh.port < 65536:
            out.append(("ssh.port", f"{self.ssh.port} is not a TCP port"))
        for name in ("gpu_count", "numa_nodes", "memory_gib"):
            value = getattr(self.expected, name)
            if value is not None and value < (0 if name == "gpu_count" else 1):
                out.append((f"expected.{name}", f"{value} is not a count"))
        return out


def _opt_str(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _typed(cls: type, value: Any, ints: tuple[str, ...] = ()) -> Any:
    """A dataclass from a property bag's dict (unknown keys ignored; ``ints`` made int again)."""
    data = dict(value or {})
    known = {f.name for f in fields(cls)}
    kwargs = {k: (int(v) if k in ints and v is not None else v) for k, v in data.items() if k in known}
    return cls(**kwargs)


def _plain(value: Any) -> Any:
    """JSON-shaped data (tuples as lists) for Pulumi's property bags."""
    return json.loads(json.dumps(value))


def _normal(value: Any) -> Any:
    """A property for comparison: whole floats as ints (Pulumi returns every number as a float)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def observed_power(state: str) -> str:
    """Redfish PowerState as the input's words: On -> on, Off -> off; transitions lowercased (poweringon)."""
    return state.lower()


@functools.cache
def _gpu_lookup() -> Callable[[str], str | None]:
    return catalog_lookup()


@functools.cache
def _gpu_catalog() -> dict[str, Any]:
    from gpufleet.catalog import load_catalog

    return load_catalog().gpus_by_pci_id


class BareMetalHostProvider(ResourceProvider):
    """CRUD of :class:`BareMetalHost` (see the module doc). ``progress``: where progress lines go (default: the
    Pulumi CLI's info stream)."""

    def __init__(self, progress: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.progress = progress
        self.stack_config: Any = None  # set by configure() in the provider process, never serialized with a value

    def configure(self, req: ConfigureRequest) -> None:
        self.stack_config = req.config

    def _say(self, message: str) -> None:
        (self.progress or pulumi.log.info)(message)

    # -- plumbing ----------------------------------------------------------------------------------------
    def _password(self, host: HostInputs, props: dict[str, Any]) -> str:
        given = rpc.unwrap_rpc_secret(props.get("password"))  # plain, unless an engine sends secrets marked
        if isinstance(given, str) and given:
            return given
        key = host.bmc_password_key
        value = self.stack_config.get(key) if key and self.stack_config is not None else None
        if isinstance(value, str) and value:
            return value
        where = f"the stack config has no {key!r}" if key else "no bmc_password_key names a stack config key"
        raise BmcError("auth", f"{host.name}: no BMC password: the password input is empty and {where}")

    @contextmanager
    def _bmc(self, host: HostInputs, props: dict[str, Any]) -> Iterator[Bmc]:
        """A session with the host's BMC; every error prefixed with the host's name."""
        try:
            endpoint = Endpoint(
                host.bmc_address,
                host.bmc_username,
                self._password(host, props),
                verify_tls=host.bmc_verify_tls,
                retry_seconds=host.timeouts.bmc_retry_s,
                read_timeout=host.timeouts.bmc_read_s,
            )
            with Bmc(endpoint, poll_seconds=host.timeouts.poll_s) as bmc:
                yield bmc
        except BmcError as exc:
            prefix = "" if str(exc).startswith(f"{host.name}: ") else f"{host.name}: "
            raise BmcError(exc.kind, prefix + str(exc)) from None

    @staticmethod
    def _inputs(props: dict[str, Any]) -> HostInputs:
        return HostInputs.from_props(props)

    # -- claim and converge ------------------------------------------------------------------------------
    def _claim(self, host: HostInputs, bmc: Bmc, inv: Inventory) -> list[str]:
        """Refuse a box that is not the one described, or that cannot do what the inputs ask, before anything
        changes. The expected items the BMC cannot confirm (checked again on the running host)."""
        diffs, unverified = hardware_differences(host.expected, _gpu_lookup(), inv=inv)
        if mac := mac_difference(host.boot_mac, inv):
            diffs.append(mac)
        if diffs:
            raise BmcError(
                "mismatch",
                f"system {inv.system_id} at {bmc.url} is not the box described: {'; '.join(diffs)};"
                " nothing was changed",
            )
        if host.power == "on" and inv.power != "On":
            target = BOOT_TARGETS[host.boot.source]
            if inv.boot.allowed_targets and target not in inv.boot.allowed_targets:
                raise BmcError(
                    "unsupported",
                    f"system {inv.system_id} at {bmc.url} cannot boot {target!r} (boot source {host.boot.source});"
                    f" BootSourceOverrideTarget allows: {', '.join(inv.boot.allowed_targets)}",
                )
            if host.boot.source == "virtual-media" and not any(
                {"CD", "DVD"} & set(m.media_types) for m in inv.virtual_media
            ):
                slots = ", ".join(f"{m.id} ({'/'.join(m.media_types)})" for m in inv.virtual_media) or "none"
                raise BmcError(
                    "unsupported",
                    f"system {inv.system_id} at {bmc.url} has no virtual CD/DVD drive (virtual media: {slots})",
                )
        return unverified

    def _converge(
        self, bmc: Bmc, host: HostInputs, inv: Inventory, previous: HostInputs | None
    ) -> tuple[HostFacts | None, list[str] | None]:
        """Bring the system to the inputs' power state (boot settings applied when it powers on); then, if on,
        wait for SSH and read the host's facts. (facts, unverified by them) - (None, None) without facts."""
        sid, t = inv.system_id, host.timeouts
        old_media = previous.boot.image_url if previous and previous.boot.source == "virtual-media" else None
        if old_media and old_media != (host.boot.image_url if host.boot.source == "virtual-media" else None):
            for slot in bmc.eject_media(sid, old_media):
                self._say(f"{host.name}: ejected {old_media} from {slot}")
        if host.power == "on" and inv.power != "On":
            if host.boot.source == "virtual-media" and host.boot.image_url:
                media = bmc.insert_media(sid, host.boot.image_url)
                self._say(f"{host.name}: virtual media {media.id}: {media.image}")
            target = BOOT_TARGETS[host.boot.source]
            sent = bmc.set_boot_override(sid, target, host.boot.mode, once=True)
            mode = f"{sent}, set now" if sent else (inv.boot.mode or "the mode the BMC does not report, left as is")
            self._say(f"{host.name}: next boot from {target} ({mode}), once; powering on")
            bmc.power_on(sid, t.power_s, self._say)
        elif host.power == "on" and previous is not None and previous.boot != host.boot:
            self._say(f"{host.name}: is on; the new boot settings apply when gpufleet next powers it on")
        elif host.power == "off" and inv.power != "Off":
            how = bmc.power_off(sid, t.graceful_off_s, t.power_s, self._say)
            self._say(f"{host.name}: powered off ({how})")
        if host.power != "on" or host.ssh is None:
            return None, None
        seconds = wait_for_ssh(host.ssh.address, host.ssh.port, t.ssh_s, self._say, interval=t.poll_s)
        self._say(f"{host.name}: SSH answers on {host.ssh.address}:{host.ssh.port} ({seconds:.0f} s)")
        if not host.ssh.private_key_path:
            return None, None
        target = SshTarget(
            host.ssh.address, host.ssh.port, host.ssh.user, host.ssh.private_key_path, host.ssh.known_hosts_file
        )
        facts = read_host_facts(target, _gpu_catalog(), t.facts_s)
        diffs, unverified = hardware_differences(host.expected, _gpu_lookup(), inv=inv, facts=facts)
        if diffs:
            raise BmcError(
                "mismatch",
                f"the running host at {host.ssh.address} is not the box described: {'; '.join(diffs)}"
                " (it was left on, for a look)",
            )
        return facts, unverified

    def _outputs(
        self, host: HostInputs, bmc: Bmc, inv: Inventory, facts: dict[str, Any] | None, unverified: list[str]
    ) -> dict[str, Any]:
        """The inputs (without the password) with the observed power state, and what was discovered."""
        out = host.to_props()
        cpus = [p for p in inv.processors or () if (p.type or "CPU").upper() == "CPU"]
        gpus = redfish_gpus(inv, _gpu_lookup())
        out.update(
            power=observed_power(inv.power),
            resolved_system_id=inv.system_id,
            system_path=f"{bmc.url}{inv.path}",
            facts={
                "serial": inv.serial,
                "uuid": inv.uuid,
                "manufacturer": inv.manufacturer,
                "model": inv.model,
                "cpu_sockets": len(cpus) if cpus else None,
                "cpu_cores": sum(p.cores or 0 for p in cpus) if cpus else None,
                "cpu_count": inv.cpu_count,
                "memory_gib": inv.memory_gib,
                "gpus": None if gpus is None else [asdict(g) for g in gpus],
                "pcie_devices": [
                    {"id": d.id, "name": d.name, "pci_ids": [f.pci_id for f in d.functions if f.pci_id]}
                    for d in inv.pcie_devices or ()
                ],
                "macs": list(inv.macs),
                "host": facts,
            },
            observed=self._observed(inv),
            unverified=unverified,
        )
        return _plain(out)

    @staticmethod
    def _observed(inv: Inventory) -> dict[str, Any]:
        return _plain(
            {
                "power_state": inv.power,
                "boot_override": asdict(inv.boot),
                "virtual_media": [asdict(m) for m in inv.virtual_media if m.inserted],
            }
        )

    # -- CRUD --------------------------------------------------------------------------------------------
    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        try:
            failures = [CheckFailure(p, r) for p, r in self._inputs(news).problems()]
        except BmcError as exc:
            failures = [CheckFailure("name", str(exc))]
        return CheckResult(news, failures)

    def create(self, props: dict[str, Any]) -> CreateResult:
        host = self._inputs(props)
        with self._bmc(host, props) as bmc:
            sid = bmc.find_system(host.system_id, host.serial)
            inv = bmc.inventory(sid)
            unverified = self._claim(host, bmc, inv)
            self._say(f"{host.name}: claimed system {sid} at {bmc.url} (power {inv.power})")
            facts, by_facts = self._converge(bmc, host, inv, previous=None)
            inv = bmc.refresh(inv)
            host_facts = facts.to_dict() if facts else None
            outs = self._outputs(host, bmc, inv, host_facts, unverified if by_facts is None else by_facts)
        return CreateResult(outs["system_path"], outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in REPLACE_ON if _normal(olds.get(k)) != _normal(news.get(k))]
        changed = [k for k in IN_PLACE if _normal(olds.get(k)) != _normal(news.get(k))]
        return DiffResult(
            changes=bool(replaces or changed),
            replaces=replaces,
            stables=["resolved_system_id", "system_path"] if not replaces else [],
            delete_before_replace=True,
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        host, previous = self._inputs(news), self._inputs(olds)
        with self._bmc(host, news) as bmc:
            sid = str(olds["resolved_system_id"])
            inv = bmc.inventory(sid)
            facts, by_facts = self._converge(bmc, host, inv, previous)
            inv = bmc.refresh(inv)
            kept = olds.get("facts") or {}
            host_facts = facts.to_dict() if facts else kept.get("host")
            unverified = by_facts if by_facts is not None else list(olds.get("unverified") or [])
            outs = self._outputs(host, bmc, inv, host_facts, unverified)
        return UpdateResult(outs)

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        host = self._inputs(props)
        with self._bmc(host, props) as bmc:
            try:
                inv = bmc.inventory(str(props["resolved_system_id"]), devices=False)
            except BmcError as exc:
                if exc.kind == "not-found":
                    return ReadResult("", {})  # the BMC no longer has the system: gone from the state too
                raise
            outs = {k: v for k, v in props.items() if k != "password"}
            outs["power"] = observed_power(inv.power)
            outs["observed"] = self._observed(inv)
            outs["facts"] = dict(outs.get("facts") or {}, serial=inv.serial, memory_gib=inv.memory_gib)
        return ReadResult(id_, outs)

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        host = self._inputs(props)
        with self._bmc(host, props) as bmc:
            sid = str(props.get("resolved_system_id") or bmc.find_system(host.system_id, host.serial))
            try:
                bmc.power_state(sid)
            except BmcError as exc:
                if exc.kind != "not-found":
                    raise
                self._say(f"{host.name}: the BMC has no system {sid} any more; nothing to do")
                return
            if host.wipe_disks_on_delete:
                bmc.erasable_drives(sid)  # refuses before anything changes when a drive cannot be erased
            how = bmc.power_off(sid, host.timeouts.graceful_off_s, host.timeouts.power_s, self._say)
            self._say(f"{host.name}: powered off ({how})")
            if host.boot.source == "virtual-media" and host.boot.image_url:
                for slot in bmc.eject_media(sid, host.boot.image_url):
                    self._say(f"{host.name}: ejected {host.boot.image_url} from {slot}")
            if host.wipe_disks_on_delete:
                erased = bmc.wipe_disks(sid, host.timeouts.wipe_s, self._say)
                self._say(f"{host.name}: erased {', '.join(erased)}")


class BareMetalHost(Resource, module="gpufleet", name="BareMetalHost"):
    """A BMC-managed server (see the module doc). ``password``: the BMC password, made a Pulumi secret here."""

    resolved_system_id: pulumi.Output[str]
    system_path: pulumi.Output[str]
    power: pulumi.Output[str]
    facts: pulumi.Output[dict[str, Any]]
    observed: pulumi.Output[dict[str, Any]]
    unverified: pulumi.Output[list[str]]

    def __init__(
        self,
        resource_name: str,
        inputs: HostInputs,
        password: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
        provider: BareMetalHostProvider | None = None,
    ) -> None:
        props: dict[str, Any] = inputs.to_props()
        props["password"] = pulumi.Output.secret(password) if password is not None else None
        props.update(dict.fromkeys(OUTPUTS))
        secret = pulumi.ResourceOptions(additional_secret_outputs=["password"])
        super().__init__(
            provider or BareMetalHostProvider(), resource_name, props, pulumi.ResourceOptions.merge(opts, secret)
        )
