"""Lab hosts as virtual machines: libvirt domains, or QEMU processes when libvirt cannot run.

libvirt 9.0 (Debian 12) runs the hosts as ``type='qemu'`` (TCG) or ``type='kvm'`` domains. It rejects passt user
networking, so the SSH-forwarding NIC and the NUMA-1 PCIe expander with the SR-IOV NVMe controller are passed in
``<qemu:commandline>`` with fixed PCI addresses; only PCIe bridges may sit on the expander, so the virtio disk and
NIC sit on ``pcie.0`` explicitly.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from xml.sax.saxutils import escape

from gpufleet.common.atomic import write_atomic
from gpufleet.lab.accel import Accel
from gpufleet.lab.config import DOMAIN_PREFIX, SHAPE, HostShape, lab_dir

URI = "qemu:///system"
QEMU_CONF = Path("/etc/libvirt/qemu.conf")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class LabHost:
    name: str  # inventory name, e.g. lab-1
    uuid: str
    ssh_port: int
    disk: Path  # qcow2 overlay of the image (a copy of the booted snapshot's, see snapshot.py)
    serial_log: Path

    @property
    def domain(self) -> str:
        return DOMAIN_PREFIX + self.name


# -- daemons the lab starts (and only those it stops) ---------------------------------------------------------


def _daemons_file() -> Path:
    return lab_dir() / "daemons.json"


def started_daemons() -> dict[str, int]:
    try:
        return json.loads(_daemons_file().read_text())
    except (OSError, ValueError):
        return {}


def record_daemon(name: str, pid: int | None) -> None:
    known = started_daemons()
    if pid is None:
        known.pop(name, None)
    else:
        known[name] = pid
    write_atomic(_daemons_file(), json.dumps(known))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _link(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # a descriptor closed since it was listed (the listing's own, for one)
        return ""


def tcp_listener(port: int, proc: Path = Path("/proc")) -> str | None:
    """Who listens on TCP ``port`` (IPv4 or IPv6, any address), from ``proc`` (``/proc``; a recorded tree in
    tests): ``pid N (command line)``, ``a process this user cannot see`` when the socket's owner is not found, or
    None when nothing listens."""
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            rows = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()  # sl local_address rem_address st ... inode
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for fd_dir in proc.glob("[0-9]*/fd"):
        try:
            fds = list(fd_dir.iterdir())
        except OSError:  # another user's process, or one that ended
            continue
        if inodes & {_link(fd) for fd in fds}:
            cmdline = (fd_dir.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            return f"pid {fd_dir.parent.name} ({cmdline[:160]})"
    return "a process this user cannot see"


def _pids(name: str) -> list[int]:
    out = subprocess.run(
        ["pgrep", "-x", name], capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    ).stdout
    return [int(p) for p in out.split()]


LAB_DAEMONS = ("resetd", "sushy", "libvirtd", "virtlogd")  # stopped in this order


def _at_normal_priority(argv: list[str]) -> list[str]:
    """``argv`` to start a lab daemon (libvirtd, virtlogd, the Redfish emulator, resetd) at nice 0 also from a lab
    under ``nice``: the daemons serve every lab of the machine, and libvirtd's QEMUs start at its priority. ``nice``
    execs the daemon, so its PID is the daemon's."""
    nice = niceness()
    return ["nice", "-n", str(-nice), *argv] if nice > 0 else argv


def start_daemon(name: str, argv: list[str], ready: Callable[[int], bool], seconds: float) -> int:
    """Start a lab daemon in its own session (output to ``<name>.log`` in the lab directory), record it for
    ``stop_started_daemons``, and wait until ``ready(pid)``. Returns its PID; RuntimeError if it exits or is not
    ready in ``seconds``."""
    log_path = lab_dir() / f"{name}.log"
    argv = _at_normal_priority(argv)
    with log_path.open("a") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    record_daemon(name, proc.pid)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited ({proc.returncode}); see {log_path}")
        if ready(proc.pid):
            return proc.pid
        time.sleep(0.1)
    raise RuntimeError(f"{name} was not ready in {seconds:.0f} s; see {log_path}")


def stop_started_daemons(progress: Progress, names: tuple[str, ...] = LAB_DAEMONS) -> None:
    """Stop the daemons this lab started, by PID, in the given order."""
    known = started_daemons()
    for name in names:
        pid = known.get(name)
        if pid and alive(pid):
            progress(f"stopping {name} (pid {pid}), which the lab started")
            os.kill(pid, signal.SIGTERM)
            for _ in range(50):
                if not alive(pid):
                    break
                time.sleep(0.1)
        record_daemon(name, None)


# -- libvirt -------------------------------------------------------------------------------------------------


class LibvirtUnavailable(RuntimeError):
    pass


def virsh(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["virsh", "-c", URI, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if check and proc.returncode:
        raise LibvirtUnavailable(f"virsh {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _configure_qemu_conf(progress: Progress) -> bool:
    """QEMU as root: with /dev/kvm root-only, libvirt otherwise re-probes QEMU on every call (~68 s each).
    Returns whether the file changed."""
    text = QEMU_CONF.read_text()
    lines = text.splitlines()
    wanted = {"user": 'user = "root"', "group": 'group = "root"'}
    if all(any(line.strip() == w for line in lines) for w in wanted.values()):
        return False
    backup = QEMU_CONF.with_name("qemu.conf.gpufleet-orig")
    if not backup.exists():
        shutil.copy2(QEMU_CONF, backup)
    out, done = [], set()
    for line in lines:
        key = line.lstrip("#").split("=", 1)[0].strip()
        if key in wanted and key not in done and ("=" in line) and line.lstrip("#").strip().startswith(key + " "):
            out.append(wanted[key])
            done.add(key)
        else:
            out.append(line)
    out += [wanted[k] for k in wanted if k not in done]
    QEMU_CONF.write_text("\n".join(out) + "\n")
    progress(f"set user/group = root in {QEMU_CONF} (original kept as {backup.name})")
    return True


def ensure_libvirt(progress: Progress) -> None:
    """libvirt's daemons running with the lab's qemu.conf; starts those that are not (without systemd)."""
    for tool in ("virsh", "libvirtd", "virtlogd", "qemu-system-x86_64"):
        if shutil.which(tool) is None:
            raise LibvirtUnavailable(f"{tool} is not installed (apt-get install libvirt-daemon-system qemu-system-x86)")
    if not QEMU_CONF.exists():
        raise LibvirtUnavailable(f"{QEMU_CONF} is missing")
    changed = _configure_qemu_conf(progress)
    ours = started_daemons()
    running = _pids("libvirtd")
    if changed and running:
        if ours.get("libvirtd") in running:
            progress("restarting libvirtd (the lab's) for the new qemu.conf")
            stop_started_daemons(progress, ("libvirtd",))
            running = []
        else:
            progress("warning: libvirtd was running before the lab changed qemu.conf; restart it to apply")
    if not _pids("virtlogd"):
        subprocess.run(_at_normal_priority(["virtlogd", "-d"]), check=True, stdin=subprocess.DEVNULL)
        time.sleep(0.3)
        record_daemon("virtlogd", max(_pids("virtlogd"), default=None))
    if not running:
        progress("starting libvirtd (its first start probes QEMU, ~15 s)")
        subprocess.run(_at_normal_priority(["libvirtd", "-d"]), check=True, stdin=subprocess.DEVNULL)
        time.sleep(0.5)
        record_daemon("libvirtd", max(_pids("libvirtd"), default=None))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if virsh("version", check=False, timeout=120).returncode == 0:
            return
        time.sleep(1)
    raise LibvirtUnavailable("libvirtd started but does not answer on " + URI)


# How a domain starts: ``cold`` boots from its disk with every device; ``template`` is the VM whose booted state
# becomes the booted snapshot (no NVMe controller: QEMU 7.2's nvme device cannot be saved); ``restore`` starts from
# that snapshot (``-loadvm``, the same devices as the template), and the lab hot-plugs the NVMe controller into it.
Boot = Literal["cold", "template", "restore"]
SNAPSHOT_TAG = "booted"  # the internal qcow2 snapshot (disk and RAM) a restored host starts from


def domain_xml(host: LabHost, accel: Accel, shape: HostShape = SHAPE, boot: Boot = "cold", nice: int = 0) -> str:
    cells, cpu = [], 0
    per_node = shape.vcpus // len(shape.node_mib)
    for node, mib in enumerate(shape.node_mib):
        cells.append(f"<cell id='{node}' cpus='{cpu}-{cpu + per_node - 1}' memory='{mib}' unit='MiB'/>")
        cpu += per_node
    args = qemu_device_args(host, shape, controller=boot == "cold")
    if boot == "restore":
        args += ["-loadvm", SNAPSHOT_TAG]
    qemu_args = "".join(f"<qemu:arg value='{escape(a)}'/>" for a in args)
    return f"""<domain type='{accel.libvirt_type}' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{host.domain}</name>
  <uuid>{host.uuid}</uuid>
  <memory unit='MiB'>{shape.memory_mib}</memory>
  <vcpu>{shape.vcpus}</vcpu>
  <sysinfo type='smbios'><system><entry name='serial'>{host.name}</entry></system></sysinfo>
  <os><type arch='x86_64' machine='q35'>hvm</type><boot dev='hd'/><smbios mode='sysinfo'/></os>
  <features><acpi/><apic/></features>
  {accel.libvirt_cpu}
    <topology sockets='{shape.sockets}' dies='1' cores='{shape.cores_per_socket}' threads='1'/>
    <numa>{"".join(cells)}</numa>
  </cpu>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>{emulator(accel, nice)}</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2' discard='unmap'/>
      <source file='{host.disk}'/>
      <target dev='vda' bus='virtio'/>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x05' function='0x0'/>
    </disk>
    <controller type='usb' model='none'/>
    <serial type='file'><source path='{host.serial_log}' append='on'/><target port='0'/></serial>
    <memballoon model='none'/>
    <iommu model='intel'><driver caching_mode='on'/></iommu>
  </devices>
  <qemu:commandline>{qemu_args}</qemu:commandline>
</domain>
"""


def nvme_controller(host: LabHost, shape: HostShape = SHAPE) -> dict[str, str | int]:
    """The SR-IOV NVMe controller (a PF with ``sriov_max_vfs`` VFs) on the NUMA-``sriov_node`` root port: QEMU
    device properties, for the command line of a cold boot and for ``device_add`` into a restored host."""
    return {
        "driver": "nvme", "id": "labnvme", "serial": f"{host.name}-sriov", "subsys": "labsubsys", "bus": "labrp1",
        "sriov_max_vfs": shape.sriov_vfs, "sriov_vq_flexible": 2 * shape.sriov_vfs,
        "sriov_vi_flexible": shape.sriov_vfs,
    }  # fmt: skip


def qemu_device_args(host: LabHost, shape: HostShape = SHAPE, controller: bool = True) -> list[str]:
    """The SSH-forwarding NIC on pcie.0 and, on NUMA node ``sriov_node``, a PCIe expander bridge with a root port
    for the NVMe controller with SR-IOV (and its NVMe subsystem, which SR-IOV needs), the controller itself only
    with ``controller``."""
    args = [
        "-netdev", f"user,id=labnet0,hostfwd=tcp:127.0.0.1:{host.ssh_port}-:22",
        "-device", "virtio-net-pci,netdev=labnet0,bus=pcie.0,addr=0x10",
        "-device", f"pxb-pcie,id=pxb1,bus_nr=128,numa_node={shape.sriov_node},bus=pcie.0,addr=0x11",
        "-device", "pcie-root-port,id=labrp1,bus=pxb1,chassis=11",
        "-device", f"nvme-subsys,id=labsubsys,nqn=nqn.2026-11.io.gpufleet:{host.name}",
    ]  # fmt: skip
    if controller:
        props = nvme_controller(host, shape)
        args += ["-device", ",".join([str(props.pop("driver"))] + [f"{k}={v}" for k, v in props.items()])]
    return args


def hotplug_nvme(host: LabHost, shape: HostShape = SHAPE) -> None:
    """Add the NVMe controller to a running domain restored from the booted snapshot (the guest's PCIe hotplug
    finds it, as a cold boot's enumeration would)."""
    command = json.dumps({"execute": "device_add", "arguments": nvme_controller(host, shape)})
    out = virsh("qemu-monitor-command", host.domain, command).stdout
    if '"return"' not in out:
        raise LibvirtUnavailable(f"{host.name}: device_add of its NVMe controller: {out.strip()}")


# An emulated Intel VT-d IOMMU (the domain's <iommu model='intel'>): the guest gets IOMMU groups and can bind the
# NVMe controller's VFs to vfio-pci, as the vfio role does on a real host. caching-mode on is what QEMU needs to
# assign a device further down (a nested guest), which the lab never starts but a real hypervisor host would.
IOMMU_ARGS = ["-device", "intel-iommu,caching-mode=on"]

QEMU = "/usr/bin/qemu-system-x86_64"
# One TCG thread per VM: libvirt 9.0 passes ``-accel tcg`` (multi-threaded TCG, a thread per vCPU) and has no
# setting for ``thread=single``, so TCG domains run QEMU through this wrapper. Measured on 2026-11-25 (2 cores,
# both lab hosts started together): SSH up after 46-48 s with one thread per VM, 57-61 s with a thread per vCPU
# (eight threads on two cores, whose cross-vCPU TLB flushes wait for descheduled threads). See docs/lab.md.
QEMU_WRAPPER = """#!/bin/sh
# written by gpufleet lab (gpufleet/lab/virt.py): QEMU{what}
for arg in "$@"; do
  if [ "$prev" = "-accel" ] && [ "$arg" = "tcg" ]; then arg="{tcg}"; fi
  set -- "$@" "$arg"
  shift
  prev="$arg"
done
{autogroup}exec {nice}{qemu} "$@"
"""
# Under autogroup scheduling (Linux's /proc/sys/kernel/sched_autogroup_enabled, on in Debian's and many VMs' kernels)
# a nice value counts only within its session's group, and libvirt starts each QEMU in a session of its own (a
# double fork: the session's leader is gone, its parent is init). The wrapper gives that group the nice value too,
# only when its session is not its parent's: never a group it shares with whoever started it.
AUTOGROUP_NICE = (
    'sid=$(cut -d" " -f6 /proc/$$/stat); parent=$(cut -d" " -f4 /proc/$$/stat)\n'
    'if [ -w /proc/$$/autogroup ] && [ "$sid" != "$(cut -d" " -f6 /proc/"$parent"/stat)" ]; then\n'
    "  echo {n} > /proc/$$/autogroup\n"
    "fi\n"
)


def niceness() -> int:
    """This process's CPU priority (its nice value). A lab brought up under ``nice`` runs its VMs at that priority
    (``define``), so that they yield the CPU to other work: the lab tests' lanes run so beside TestLab."""
    return os.getpriority(os.PRIO_PROCESS, 0)


def emulator(accel: Accel, nice: int = 0) -> str:
    """The QEMU binary a domain runs: a wrapper (``define`` writes it) that runs QEMU with one TCG thread (under TCG
    unless ``GPUFLEET_LAB_TCG_THREADS=multi``) and at CPU priority ``nice`` (above 0); QEMU itself otherwise."""
    name = ("qemu-tcg-single" if accel.tcg_single_thread else "qemu") + (f"-nice{nice}" if nice > 0 else "")
    return QEMU if name == "qemu" else str(lab_dir() / name)


def _wrapper(accel: Accel, nice: int) -> str:
    what = (" with -accel tcg,thread=single instead of -accel tcg" if accel.tcg_single_thread else "") + (
        f" at nice {nice}" if nice > 0 else ""
    )
    tcg = "tcg,thread=single" if accel.tcg_single_thread else "tcg"
    nice_cmd = f"nice -n {nice} " if nice > 0 else ""
    autogroup = AUTOGROUP_NICE.replace("{n}", str(nice)) if nice > 0 else ""
    fields = {"{what}": what, "{tcg}": tcg, "{autogroup}": autogroup, "{nice}": nice_cmd, "{qemu}": QEMU}
    text = QEMU_WRAPPER
    for field, value in fields.items():
        text = text.replace(field, value)
    return text


def define(host: LabHost, accel: Accel, boot: Boot = "cold") -> None:
    """Define (or redefine) ``host``'s domain to start as ``boot`` (Boot) next, at this process's CPU priority
    (:func:`niceness`); a running domain keeps its devices until then."""
    nice = max(0, niceness())
    wrapper = emulator(accel, nice)
    if wrapper != QEMU:
        text = _wrapper(accel, nice)
        if not Path(wrapper).exists() or Path(wrapper).read_text() != text:
            Path(wrapper).write_text(text)
            Path(wrapper).chmod(0o755)
    path = host.disk.parent / "domain.xml"
    path.write_text(domain_xml(host, accel, boot=boot, nice=nice))
    virsh("define", str(path))


def domain_state(host: LabHost) -> str:
    proc = virsh("domstate", host.domain, check=False, timeout=60)
    return proc.stdout.strip() if proc.returncode == 0 else "undefined"


def domain_pid(host: LabHost) -> int | None:
    """The PID of a running domain's QEMU process (libvirt's pid file), else None."""
    try:
        pid = int((Path("/run/libvirt/qemu") / f"{host.domain}.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def remove_domain(host: LabHost) -> None:
    if domain_state(host) == "undefined":
        return
    virsh("destroy", host.domain, check=False)
    virsh("undefine", host.domain, check=False)


def lab_domains() -> list[str]:
    out = virsh("list", "--all", "--name", check=False).stdout
    return [d for d in out.split() if d.startswith(DOMAIN_PREFIX)]


# -- direct QEMU (when libvirt cannot run) -------------------------------------------------------------------


def qemu_command(host: LabHost, accel: Accel, shape: HostShape = SHAPE) -> list[str]:
    """The same host as a plain QEMU process (daemonized, pid file next to its disk)."""
    per_node = shape.vcpus // len(shape.node_mib)
    numa: list[str] = []
    for node, mib in enumerate(shape.node_mib):
        cpus = f"{node * per_node}-{(node + 1) * per_node - 1}"
        numa += ["-object", f"memory-backend-ram,id=labmem{node},size={mib}M",
                 "-numa", f"node,nodeid={node},cpus={cpus},memdev=labmem{node}"]  # fmt: skip
    return [
        "qemu-system-x86_64", "-name", host.domain, "-uuid", host.uuid, "-machine", "q35", *accel.qemu_args,
        "-smp", f"{shape.vcpus},sockets={shape.sockets},cores={shape.cores_per_socket},threads=1",
        "-m", f"{shape.memory_mib}M", *numa,
        "-smbios", f"type=1,serial={host.name}",
        *IOMMU_ARGS,  # QEMU wants the IOMMU before the PCI devices it translates for
        "-drive", f"file={host.disk},if=none,id=labdisk,format=qcow2",
        "-device", "virtio-blk-pci,drive=labdisk,bus=pcie.0,addr=0x5",
        *qemu_device_args(host, shape),
        "-display", "none", "-serial", f"file:{host.serial_log}",
        "-daemonize", "-pidfile", str(host.disk.parent / "qemu.pid"),
    ]  # fmt: skip


def qemu_pid(host: LabHost) -> int | None:
    try:
        pid = int((host.disk.parent / "qemu.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def qemu_start(host: LabHost, accel: Accel) -> None:
    if qemu_pid(host) is None:
        subprocess.run(qemu_command(host, accel), check=True, stdin=subprocess.DEVNULL)


def qemu_stop(host: LabHost) -> None:
    pid = qemu_pid(host)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not alive(pid):
                break
            time.sleep(0.1)
