"""The local bare-metal lab: Debian VMs with two NUMA nodes, an SR-IOV device and a Redfish BMC each, and system
containers of the same Debian tree for what needs no kernel of its own.

``Lab(...).up()`` builds (or reuses) the image, starts libvirt and the Redfish emulator when they are not running,
defines the hosts, powers them on through Redfish, waits for SSH and writes the inventory; ``down()`` powers them
off through Redfish, removes them and stops only what the lab started. ``Lab(..., kind="container")`` boots the
image's tree as systemd-nspawn containers instead (container.py), reached over SSH the same way. See docs/lab.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gpufleet.common.atomic import write_atomic
from gpufleet.lab import container, redfish, resetd, snapshot, ssh, virt
from gpufleet.lab import image as image_mod
from gpufleet.lab.accel import Accel, detect
from gpufleet.lab.config import SSH_PORT_BASE, host_uuid, lab_dir, lab_lock, prefix_lock

Progress = Callable[[str], None]
BOOT_TIMEOUT = 420  # seconds from power-on to SSH (software emulation boots in ~35 s; a busy 2-core machine is slower)


# ssh's ConnectTimeout for Ansible's connections to lab hosts (TCP connect and banner): a host busy beside four
# other VMs took over 5 s to send its banner (gpufleet/lab/ssh.py); one still booting never sends it.
INVENTORY_CONNECT_S = 20
KEPT_CONSOLES = 40  # console logs of removed hosts kept in the lab's logs (the newest)


class LabError(RuntimeError):
    """The lab cannot do what was asked; the message says what is missing or what failed."""


@dataclass
class HostStatus:
    name: str
    uuid: str
    ssh_port: int
    power: str
    ssh: bool
    backend: str
    console: str  # the serial console log: why a host that does not answer SSH is stuck


@dataclass
class UpResult:
    accel: Accel
    backend: str  # "libvirt" or "qemu"
    redfish: str | None  # BMC URL, or None when unavailable
    redfish_reason: str | None
    hosts: list[virt.LabHost]
    image_built: bool
    image_seconds: float
    boot_seconds: dict[str, float] = field(default_factory=dict)
    restored: list[str] = field(default_factory=list)  # hosts started from the booted snapshot (snapshot.py)
    snapshot_seconds: float = 0.0  # making the booted snapshot, when this `up` made it
    total_seconds: float = 0.0


KINDS = ("vm", container.KIND)
# system containers: no accelerator to choose, no BMC
CONTAINER_ACCEL = Accel("native", "system containers (systemd-nspawn) run at this machine's speed")


class Lab:
    """A set of lab hosts named ``<prefix>-1 .. <prefix>-<count>``: VMs, or system containers with
    ``kind="container"`` (an existing lab keeps the kind it was brought up with)."""

    def __init__(
        self, prefix: str = "lab", count: int = 2, progress: Progress = print, kind: str | None = None
    ) -> None:
        self.prefix, self.count, self.progress = prefix, count, progress
        self.state_path = lab_dir() / f"lab-{prefix}.json"
        self.kind = kind or self._state().get("kind", "vm")
        if self.kind not in KINDS:
            raise LabError(f"lab kind {self.kind!r}: expected one of {', '.join(KINDS)}")

    # -- state ---------------------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, **changes: Any) -> None:
        state = {**self._state(), **changes}
        write_atomic(self.state_path, json.dumps(state, indent=2))

    def _ports_in_use_by_other_labs(self) -> set[int]:
        return _ports_in_state_files(but=self.state_path)

    def hosts(self) -> list[virt.LabHost]:
        known = {h["name"]: h for h in self._state().get("hosts", [])}
        taken = self._ports_in_use_by_other_labs() | {h["ssh_port"] for h in known.values()}
        hosts = []
        port = SSH_PORT_BASE + (1 if self.prefix == "lab" else 80)
        for i in range(1, self.count + 1):
            name = f"{self.prefix}-{i}"
            if name in known:
                p = known[name]["ssh_port"]
            else:
                while port in taken or not _port_free(port):
                    port += 1
                p = port
                taken.add(p)
            hosts.append(replace(_host_named(name), ssh_port=p))
        return hosts

    # -- up ------------------------------------------------------------------------------------------------
    def up(self, inventory: Path | None = None, fresh: bool = False) -> UpResult:
        """Bring this lab's hosts up (kept when running). Two ``up``s of one lab take turns, the whole of each
        (:func:`prefix_lock`): the second finds the hosts the first brought up, restored and renamed."""
        started = time.monotonic()
        with prefix_lock(self.prefix, self.progress):
            result = self._up(inventory, fresh)
        result.total_seconds = time.monotonic() - started
        return result

    def _up(self, inventory: Path | None, fresh: bool) -> UpResult:
        state = self._state()
        if state and state.get("kind", "vm") != self.kind:
            raise LabError(
                f"lab {self.prefix!r} is up as {state.get('kind', 'vm')} hosts; `gpufleet lab down --prefix "
                f"{self.prefix}` first"
            )
        if self.kind == container.KIND:
            result = self._up_containers(fresh)
        else:
            with lab_lock(self.progress):  # shared resources; released while the hosts boot
                result, power_on_at = self._start(fresh)
            result.boot_seconds = self._wait_ssh(result.hosts, power_on_at)
            with ThreadPoolExecutor() as pool:  # each restored host at once: a few seconds of guest work each
                list(pool.map(self._adopt, [h for h in result.hosts if h.name in result.restored]))
        if inventory is not None:
            write_inventory(inventory, result.hosts, result)
            self.progress(f"inventory written: {inventory}")
        return result

    def _start(self, fresh: bool) -> tuple[UpResult, dict[str, float]]:
        say = self.progress
        image, accel, backend, reason = _vm_machine(say)
        hosts = self.hosts()
        if fresh:
            self._remove_hosts(hosts, backend)
        booted = _booted_snapshot(image, accel, say) if backend == "libvirt" else None
        restored = [h.name for h in hosts if self._prepare(h, image.path, booted)]
        self._save(hosts=[asdict(h) | {"disk": str(h.disk), "serial_log": str(h.serial_log)} for h in hosts],
                   backend=backend)  # fmt: skip
        result = UpResult(accel, backend, None, reason, hosts, image.built_now, image.seconds, restored=restored,
                          snapshot_seconds=booted.seconds if booted else 0.0)  # fmt: skip
        power_on_at: dict[str, float] = {}
        if backend == "libvirt":
            for host in hosts:
                # a running domain takes a changed definition at its next start
                virt.define(host, accel, boot="restore" if host.name in restored else "cold")
            try:
                client = redfish.ensure_emulator([h.uuid for h in self._all_lab_hosts()], say)
                result.redfish = client.creds.url
            except redfish.RedfishUnavailable as exc:
                result.redfish_reason = str(exc)
                raise LabError(f"Redfish BMC unavailable: {exc}") from None
            try:
                resetd.ensure(say)
            except RuntimeError as exc:
                raise LabError(str(exc)) from None
            for host in hosts:
                if client.power_state(host.uuid) != "On":
                    say(f"{host.name}: power On through Redfish ({client.creds.url}/redfish/v1/Systems/{host.uuid})"
                        + (", from the booted snapshot" if host.name in restored else ""))  # fmt: skip
                    client.reset(host.uuid, "On")
                    power_on_at[host.name] = time.monotonic()
                if host.name in restored:  # its next start is a cold boot; it gets its NVMe controller now
                    virt.define(host, accel, boot="cold")
                    virt.hotplug_nvme(host)
        else:
            for host in hosts:
                if virt.qemu_pid(host) is None:
                    virt.qemu_start(host, accel)
                    power_on_at[host.name] = time.monotonic()
        return result, power_on_at

    def _up_containers(self, fresh: bool) -> UpResult:
        with lab_lock(self.progress):  # the image and the port choice are shared with the other labs
            try:
                image = image_mod.ensure_image(self.progress)
            except image_mod.ImageError as exc:
                raise LabError(str(exc)) from None
            hosts = self.hosts()
            if fresh:
                for host in hosts:
                    container.stop(self._container(host), self.progress)
            self._save(kind=container.KIND, hosts=[{"name": h.name, "uuid": h.uuid, "ssh_port": h.ssh_port}
                                                   for h in hosts])  # fmt: skip
        result = UpResult(CONTAINER_ACCEL, "nspawn", None, "system containers have no BMC", hosts, image.built_now,
                          image.seconds)  # fmt: skip
        try:
            for host in hosts:
                result.boot_seconds[host.name] = container.start(self._container(host), image.rootfs, self.progress)
        except container.ContainerError as exc:
            raise LabError(str(exc)) from None
        return result

    @staticmethod
    def _container(host: virt.LabHost) -> container.ContainerHost:
        return container.ContainerHost(host.name, host.ssh_port)

    def _all_lab_hosts(self) -> list[virt.LabHost]:
        """Hosts of every VM lab on this machine (the one emulator serves them all)."""
        hosts = {h.uuid: h for h in self.hosts()}
        for path in lab_dir().glob("lab-*.json"):
            try:
                state = json.loads(path.read_text())
                if state.get("kind", "vm") != "vm":
                    continue
                for h in state.get("hosts", []):
                    hosts.setdefault(h["uuid"], h)
            except (OSError, ValueError, KeyError):
                pass
        return [h if isinstance(h, virt.LabHost) else _host_from(h) for h in hosts.values()]

    def _prepare(self, host: virt.LabHost, base: Path, booted: snapshot.Booted | None) -> bool:
        """Give a new host its disk: a copy of the booted snapshot's (returns True: it starts from that state), or
        an overlay of the image (it boots)."""
        host.disk.parent.mkdir(parents=True, exist_ok=True)
        if host.disk.exists():
            return False
        if booted is not None:
            partial = host.disk.with_suffix(".partial")
            shutil.copyfile(booted.disk, partial)
            partial.rename(host.disk)
            return True
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(base), "-F", "qcow2", str(host.disk)],
            check=True,
            stdin=subprocess.DEVNULL,
        )
        return False

    def _adopt(self, host: virt.LabHost) -> None:
        """A host restored from the booted snapshot takes its own identity (snapshot.identity_script) and waits
        for its hot-plugged NVMe controller to be bound to its driver."""
        key = image_mod.ssh_key()
        script = snapshot.identity_script(host.name, time.time())
        script += "; for i in $(seq 1 60); do ls /sys/bus/pci/drivers/nvme | grep -q : && exit 0; sleep 0.5; done; "
        script += "echo 'the hot-plugged NVMe controller has no driver after 30 s' >&2; exit 1"
        done = ssh.run(key, host.ssh_port, script, timeout=180)
        if done.returncode:
            raise LabError(f"{host.name}: taking its identity after the restore failed: {done.stderr.strip()}")
        self.progress(f"{host.name}: restored from the booted snapshot, renamed, its NVMe controller plugged in")

    def _wait_ssh(self, hosts: list[virt.LabHost], power_on_at: dict[str, float]) -> dict[str, float]:
        key = image_mod.ssh_key()
        results: dict[str, float] = {}
        errors: dict[str, str] = {}
        waiting = {h.name for h in hosts}
        lock = threading.Lock()

        def one(host: virt.LabHost) -> None:
            try:
                ssh.wait(key, host.ssh_port, BOOT_TIMEOUT, console=host.serial_log)
                since = power_on_at.get(host.name)
                with lock:
                    results[host.name] = time.monotonic() - since if since else 0.0
            except TimeoutError as exc:
                with lock:
                    tail = ssh.console_tail(host.serial_log)
                    errors[host.name] = f"{exc}; serial console log: {host.serial_log}, ending:\n{tail}"
            finally:
                with lock:
                    waiting.discard(host.name)

        threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in hosts]
        for t in threads:
            t.start()
        start, last = time.monotonic(), 0.0
        while any(t.is_alive() for t in threads):
            time.sleep(1)
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                with lock:
                    pending = ", ".join(sorted(waiting))
                if pending:
                    self.progress(f"waiting for SSH: {pending} ({time.monotonic() - start:.0f} s)")
        for name, seconds in sorted(results.items()):
            self.progress(f"{name}: SSH up" + (f", {seconds:.0f} s after power-on" if seconds else " (was running)"))
        if errors:
            raise LabError("; ".join(f"{n}: {e}" for n, e in sorted(errors.items())))
        return results

    # -- down / status -------------------------------------------------------------------------------------
    def _remove_hosts(self, hosts: list[virt.LabHost], backend: str) -> None:
        client = self._client_or_none()
        for host in hosts:
            if backend == "libvirt":
                if client is not None and virt.domain_state(host) == "running":
                    self.progress(f"{host.name}: ForceOff through Redfish")
                    try:
                        client.reset(host.uuid, "ForceOff")
                    except redfish.RedfishError as exc:
                        self.progress(f"{host.name}: Redfish ForceOff failed ({exc}); destroying the domain")
                virt.remove_domain(host)
            else:
                virt.qemu_stop(host)
            self._keep_console(host)
            shutil.rmtree(host.disk.parent, ignore_errors=True)

    def _keep_console(self, host: virt.LabHost) -> None:
        """Move a removed host's serial console log to the lab's logs, so that a failed run (a reboot that never
        came back, say) can still be read after Molecule or a test has removed its host."""
        if not host.serial_log.is_file():
            return
        logs = lab_dir() / "logs"
        logs.mkdir(exist_ok=True)
        kept = logs / f"{time.strftime('%Y%m%d-%H%M%S')}-{host.name}-console.log"
        shutil.move(host.serial_log, kept)
        for old in sorted(logs.glob("*-console.log"))[:-KEPT_CONSOLES]:
            old.unlink(missing_ok=True)
        self.progress(f"{host.name}: its console log is kept in {kept}")

    def down(self) -> None:
        with prefix_lock(self.prefix, self.progress), lab_lock(self.progress):
            self._down()

    def _down(self) -> None:
        state = self._state()
        backend = state.get("backend", "libvirt")
        hosts = self.hosts()
        if self.kind == container.KIND:
            for host in hosts:
                container.stop(self._container(host), self.progress)
        elif backend == "libvirt" and self._libvirt_for_down():
            self._remove_hosts(hosts, backend)
        else:
            for host in hosts:
                virt.qemu_stop(host)
                self._keep_console(host)
                shutil.rmtree(host.disk.parent, ignore_errors=True)
        self.state_path.unlink(missing_ok=True)
        others = [p.stem.removeprefix("lab-") for p in lab_dir().glob("lab-*.json") if _vm_lab_alive(p, self.progress)]
        if not others:
            virt.stop_started_daemons(self.progress)
        else:
            self.progress(f"other VM labs are still up ({', '.join(sorted(others))}): leaving libvirt and the Redfish "
                          "emulator running")  # fmt: skip

    def _libvirt_for_down(self) -> bool:
        """libvirt answering, started again if it is not (e.g. after a restart of the machine): its domains are
        defined on disk, and ``down`` removes them."""
        if _libvirt_answers():
            return True
        try:
            virt.ensure_libvirt(self.progress)
        except (virt.LibvirtUnavailable, OSError, subprocess.CalledProcessError) as exc:
            self.progress(f"libvirt unavailable ({exc}): removing the hosts' files only")
            return False
        return True

    def _client_or_none(self) -> redfish.Client | None:
        client = redfish.Client(redfish.credentials(), timeout=10, retry_seconds=0)
        try:
            client.systems()
            return client
        except redfish.RedfishError:
            return None

    def status(self) -> list[HostStatus]:
        state = self._state()
        backend = state.get("backend", "libvirt")
        key = image_mod.ssh_key()
        client = self._client_or_none() if backend == "libvirt" else None
        out = []
        for host in self.hosts() if state else []:
            if client is not None:
                try:
                    power = client.power_state(host.uuid)
                except redfish.RedfishError:
                    power = "unknown to the BMC"
            elif backend == "qemu":
                power = "On" if virt.qemu_pid(host) else "Off"
            elif self.kind == container.KIND:
                power = "On" if self._container(host).pid() else "Off"
            else:
                power = "BMC unreachable"
            reachable = power == "On" and ssh.reachable(key, host.ssh_port)
            console = self._container(host).console if self.kind == container.KIND else host.serial_log
            out.append(HostStatus(host.name, host.uuid, host.ssh_port, power, reachable, backend, str(console)))
        return out


def _ports_in_state_files(but: Path | None = None) -> set[int]:
    """The SSH ports the labs on this machine hold (their state files; ``but`` one of them)."""
    used: set[int] = set()
    for path in lab_dir().glob("lab-*.json"):
        if path != but:
            with contextlib.suppress(OSError, ValueError, KeyError):
                used |= {h["ssh_port"] for h in json.loads(path.read_text()).get("hosts", [])}
    return used


def _vm_machine(say: Progress) -> tuple[image_mod.Image, Accel, str, str | None]:
    """What a VM lab runs on: the image (built first if its recipe changed), the accelerator, and the backend
    (``libvirt``, or ``qemu`` with the reason libvirt is not used)."""
    try:
        image = image_mod.ensure_image(say)
    except image_mod.ImageError as exc:
        raise LabError(str(exc)) from None
    say(
        f"image {image.recipe}: "
        + (f"built in {image.seconds:.0f} s" if image.built_now else f"cached ({image.path.parent})")
    )
    accel = detect(image.kernel)
    say(f"accelerator: {'KVM' if accel.name == 'kvm' else 'software emulation (TCG)'} — {accel.reason}")
    try:
        if os.environ.get("GPUFLEET_LAB_BACKEND") == "qemu":
            raise virt.LibvirtUnavailable("GPUFLEET_LAB_BACKEND=qemu asks for QEMU without libvirt")
        virt.ensure_libvirt(say)
    except virt.LibvirtUnavailable as exc:
        say(f"libvirt not used ({exc}): starting the VMs with QEMU directly; Redfish BMCs are unavailable")
        return image, accel, "qemu", str(exc)
    return image, accel, "libvirt", None


def _booted_snapshot(image: image_mod.Image, accel: Accel, progress: Progress) -> snapshot.Booted | None:
    """The booted snapshot new hosts start from (made now if there is none, with a free port for the template), or
    None, said, when it cannot be made: the hosts then boot from the image."""
    taken = _ports_in_state_files()
    port = next(p for p in range(SSH_PORT_BASE + 200, SSH_PORT_BASE + 400) if p not in taken and _port_free(p))
    try:
        return snapshot.ensure(image.path, image.recipe, accel, image_mod.ssh_key(), port, progress)
    except (snapshot.SnapshotError, virt.LibvirtUnavailable, subprocess.SubprocessError, OSError) as exc:
        progress(f"warning: no booted snapshot ({exc}); the hosts boot from the image")
        return None


def ensure_booted_snapshot(progress: Progress = print) -> snapshot.Booted | None:
    """The image and the booted snapshot every new VM of the lab starts from, made now where missing (the lab
    session makes it once, before its labs come up); None where the VMs cannot use one (no libvirt)."""
    with lab_lock(progress):
        image, accel, backend, _reason = _vm_machine(progress)
        return _booted_snapshot(image, accel, progress) if backend == "libvirt" else None


def _vm_lab_alive(path: Path, progress: Progress) -> bool:
    """Whether the VM lab of state file ``path`` still has a host (its domain defined in libvirt, or its QEMU
    running). A state file none of whose hosts exists is stale (its lab was killed, its hosts removed since): it is
    removed, so that it keeps no daemon running. Container labs need none of the VM labs' daemons."""
    try:
        state = json.loads(path.read_text())
        if state.get("kind", "vm") != "vm":
            return False
        # by name only: where a host's files are follows from it, so a state file written by another version of
        # the lab (other keys) still finds its hosts, instead of being taken for stale while its VMs run
        hosts = [_host_named(h["name"]) for h in state.get("hosts", [])]
    except (OSError, ValueError, KeyError, TypeError):
        hosts, state = [], {}
    if state.get("backend", "libvirt") == "libvirt" and _libvirt_answers():
        alive = any(virt.domain_state(h) != "undefined" for h in hosts)
    else:
        alive = any(virt.qemu_pid(h) is not None or h.disk.exists() for h in hosts)
    if not alive:
        progress(f"{path.name}: none of its hosts exists any more; removing this stale lab state")
        path.unlink(missing_ok=True)
    return alive


def _host_named(name: str) -> virt.LabHost:
    folder = lab_dir() / "hosts" / name
    return virt.LabHost(name, host_uuid(name), 0, folder / "disk.qcow2", folder / "serial.log")


def _host_from(data: dict[str, Any]) -> virt.LabHost:
    return virt.LabHost(
        data["name"],
        data["uuid"],
        data["ssh_port"],
        Path(data["disk"]),
        Path(data["serial_log"]),
    )


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _libvirt_answers() -> bool:
    if shutil.which("virsh") is None:
        return False
    try:
        return virt.virsh("version", check=False, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def write_inventory(path: Path, hosts: list[virt.LabHost], result: UpResult, group: str = "lab") -> None:
    """The lab's Ansible inventory: SSH on 127.0.0.1 ports with the lab key, each host's BMC endpoint."""
    from gpufleet.mig.outputs import dump_yaml

    key = image_mod.ssh_key()
    entries = {}
    for h in hosts:
        entries[h.name] = {
            "ansible_host": "127.0.0.1",
            "ansible_port": h.ssh_port,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(key),
            "gpufleet_bmc": (
                {"url": result.redfish, "system_id": h.uuid, "credentials_file": str(lab_dir() / "redfish.json")}
                if result.redfish
                else None
            ),
        }
    inventory = {
        "all": {
            "vars": {
                # host keys are per VM and throw-away; keep-alives notice a rebooted host's dead connection in ~15 s.
                # ConnectTimeout: QEMU's user network accepts a connection to a host that is still booting at once
                # and holds it until the guest answers, which its SYN retries may notice late; ssh gives up on the
                # TCP connect and the banner after INVENTORY_CONNECT_S and Ansible tries again. Without it one such
                # connection ran out the reboot module's whole 60 s, after the host's sshd was up (2026-11-28).
                "ansible_ssh_common_args": (
                    "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
                    f" -o ServerAliveInterval=5 -o ServerAliveCountMax=3 -o ConnectTimeout={INVENTORY_CONNECT_S}"
                ),
                "ansible_python_interpreter": "/usr/bin/python3",
                # the same throw-away host keys for Mitogen's connection (it checks them itself, not through ssh)
                "ansible_host_key_checking": False,
                # Mitogen's connection timeout covers its whole start on the host (ssh, Python, its bootstrap), not
                # only the TCP connect: an emulated host busy beside three others took over Ansible's default 10 s
                "ansible_timeout": 120,
            },
            "children": {group: {"hosts": entries}},
        }
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Written by `gpufleet lab up`; not committed.\n" + dump_yaml(inventory))
