"""`gpufleet lab verify`: each lab host's real state, read over SSH, against its topology plan and, on hosts with
NVIDIA GPUs, its driver plan."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.common.yamldoc import read_yaml
from gpufleet.host import driverstate, hostfacts
from gpufleet.host.hostfacts import NVIDIA
from gpufleet.lab import ssh

HOSTFACTS = Path(hostfacts.__file__)  # run on a host by its own python3, as the Ansible modules ship it
DRIVERSTATE = Path(driverstate.__file__)
KUBELET_DROPIN = "/etc/kubernetes/kubelet.conf.d/60-gpufleet-numa.conf"


@dataclass
class HostReport:
    host: str
    port: int
    reachable: bool
    facts: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)
    cmdline: str = ""
    kubelet: dict[str, Any] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.reachable and not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "ok": self.ok,
            "reachable": self.reachable,
            "cmdline": self.cmdline,
            "numa_nodes": self.facts.get("numa_nodes", []),
            "sriov": [
                {"pci": d["pci"], "numvfs": d["sriov_numvfs"], "numa_node": d["numa_node"]}
                for d in self.facts.get("sriov_devices", [])
            ],
            "kubelet": self.kubelet,
            "mismatches": self.mismatches,
        }

    def render(self) -> str:
        from gpufleet.host.hostfacts import format_cpulist

        verdict = "OK" if self.ok else "MISMATCH" if self.reachable else "UNREACHABLE"
        head = f"{self.host} (127.0.0.1:{self.port})  {verdict}"
        if not self.reachable:
            return head
        lines = [head]
        planned = {(h["numa_node"], h["size_kib"]): h["count"] for h in self.plan.get("hugepages", [])}
        for node in self.facts["numa_nodes"]:
            pages = []
            for size, label in (("1048576", "1G"), ("2048", "2M")):
                have = node["hugepages"].get(size, 0)
                want = planned.get((node["id"], int(size)), 0)
                pages.append(f"{label} x{have} (plan {want})")
            gib = node["memory_kib"] / 1048576
            lines.append(f"  NUMA node {node['id']}: CPUs {format_cpulist(node['cpus'])}, {gib:.1f} GiB;")
            lines[-1] += f" hugepages {', '.join(pages)}"
        for dev in self.facts.get("sriov_devices", []):
            vfs = f"{dev['sriov_numvfs']} of {dev['sriov_totalvfs']} VFs"
            lines.append(f"  SR-IOV {dev['pci']} (NUMA node {dev['numa_node']}): {vfs}")
        lines.append(f"  /proc/cmdline: {self.cmdline}")
        k = self.kubelet
        if k:
            lines.append(
                f"  kubelet: cpuManagerPolicy {k.get('cpuManagerPolicy')},"
                f" reservedSystemCPUs {k.get('reservedSystemCPUs')},"
                f" topologyManagerPolicy {k.get('topologyManagerPolicy')},"
                f" memoryManagerPolicy {k.get('memoryManagerPolicy')}"
            )
        lines += [f"  mismatch: {m}" for m in self.mismatches] or ["  matches its plan"]
        return "\n".join(lines)


def _remote_python(key: Path, port: int, script: str) -> str:
    """What a Python script printed, run by the host's own python3 over SSH (as Ansible runs its modules)."""
    done = subprocess.run(
        ssh.command(key, port, "python3 -"), input=script, capture_output=True, text=True, timeout=120
    )
    if done.returncode:
        raise RuntimeError(f"running Python over SSH: {done.stderr.strip()}")
    return done.stdout


def _remote_facts(key: Path, port: int) -> dict[str, Any]:
    """The host's topology facts: gpufleet/host/hostfacts.py run by the host's own python3 (as the Ansible module
    does)."""
    script = HOSTFACTS.read_text() + "\nimport json as _j\nprint(_j.dumps(read_host('/')))\n"
    return json.loads(_remote_python(key, port, script))


def driver_mismatches(run_python: Callable[[str], str], branch: str, root: str = "/") -> list[str]:
    """How a host's NVIDIA driver differs from the plan of the release's ``branch`` (open modules, the source the
    nvidia_driver role chooses for the host's distribution): gpufleet/host/driverstate.py read on the host through
    ``run_python`` (a script in, its output back), judged by gpufleet.host.driver.driver_problems, as the role's verify
    tasks judge it."""
    from gpufleet.host.driver import DriverPlanError, DriverState, Platform, driver_problems, plan_driver

    source = DRIVERSTATE.read_text()
    facts = json.loads(run_python(source + f"\nimport json as _j\nprint(_j.dumps(read_platform({root!r})))\n"))
    platform = Platform.from_facts(facts)
    try:
        plan = plan_driver(platform, branch=branch)
    except DriverPlanError as exc:
        return [f"NVIDIA driver: {exc}"]
    args = (platform.kernel, plan.kernel_module, plan.nouveau_blacklist, plan.version_package, root)
    state = json.loads(run_python(source + f"\nimport json as _j\nprint(_j.dumps(read_driver_state(*{args!r})))\n"))
    return [f"NVIDIA driver: {p}" for p in driver_problems(DriverState.from_dict(state), branch=branch)]


def host_report(name: str, port: int, key: Path, profile: Any, driver_branch: str) -> HostReport:
    from gpufleet.catalog import load_catalog
    from gpufleet.host.topology import plan

    report = HostReport(name, port, ssh.reachable(key, port))
    if not report.reachable:
        return report
    catalog = load_catalog().gpus_by_pci_id
    report.facts = _remote_facts(key, port)
    for gpu in report.facts["gpus"]:
        known = catalog.get(f"{gpu['vendor']}:{gpu['device']}") or {}
        gpu["model"], gpu["mig_capable"] = known.get("model"), known.get("mig")
    wanted = plan(report.facts, profile, name)
    report.plan = wanted.to_dict()
    report.cmdline = report.facts["cmdline"]
    running = set(report.cmdline.split())
    for arg in wanted.kernel_args:
        if arg not in running:
            report.mismatches.append(f"/proc/cmdline lacks {arg}")
    nodes = {n["id"]: n for n in report.facts["numa_nodes"]}
    for h in wanted.hugepages:
        have = nodes[h["numa_node"]]["hugepages"].get(str(h["size_kib"]), 0)
        if have != h["count"]:
            report.mismatches.append(
                f"NUMA node {h['numa_node']}: {have} hugepages of {h['size_kib']} kB, plan {h['count']}"
            )
    devices = {d["pci"]: d for d in report.facts["sriov_devices"]}
    for want in wanted.sriov:
        have = devices.get(want["pci"], {}).get("sriov_numvfs", 0)
        if have != want["numvfs"]:
            report.mismatches.append(f"{want['pci']}: {have} VFs, plan {want['numvfs']}")
    if any(gpu["vendor"] == NVIDIA for gpu in report.facts["gpus"]):
        report.mismatches += driver_mismatches(lambda script: _remote_python(key, port, script), driver_branch)
    dropin = ssh.run(key, port, f"cat {KUBELET_DROPIN}", timeout=60)
    if dropin.returncode:
        report.mismatches.append(f"{KUBELET_DROPIN} is missing")
    else:
        doc, _ = read_yaml(KUBELET_DROPIN, dropin.stdout)
        report.kubelet = {k: v for k, v in (doc or {}).items() if k not in ("apiVersion", "kind")}
        for k, v in wanted.kubelet.items():
            if json.loads(json.dumps(report.kubelet.get(k), default=str)) != json.loads(json.dumps(v)):
                report.mismatches.append(f"kubelet {k} is {report.kubelet.get(k)!r}, plan {v!r}")
    return report


def lab_report(inventory: Path, stack_name: str, project: Path) -> list[HostReport]:
    """A report per host of the lab inventory, against the plan of the stack's tuning profile (the stack is the
    project's: the inventory may be written anywhere, e.g. by ``lab run --inventory``)."""
    from gpufleet.spec.files import resolve_stack
    from gpufleet.spec.load import load_stack

    doc, errors = read_yaml(inventory)
    if errors:
        raise RuntimeError(str(errors[0]))
    stack = load_stack(resolve_stack(stack_name, project)).stack
    assert stack is not None and stack.baremetal is not None
    reports = []
    for group in stack.baremetal.host_groups:
        hosts = (doc["all"]["children"].get(group.name) or {}).get("hosts") or {}
        profile = stack.tuning_profile(group.tuning_profile)
        for name, host in hosts.items():
            key = Path(host["ansible_ssh_private_key_file"])
            reports.append(host_report(name, host["ansible_port"], key, profile, stack.release.driver_branch))
    return reports
