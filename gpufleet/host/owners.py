"""Who owns a host's NVIDIA driver and who advertises its GPUs, as the host shows it, against its host group's plan
(``verify``'s ``owners`` column, docs/kubernetes.md). The stack side, which owner each key chooses, is
:mod:`gpufleet.spec.owners`.

Two owners of one concern are the failures users meet most on GPU nodes: the host's driver and the GPU Operator's
driver container both loading a driver, or the device plugin and the DRA driver both handing the same GPUs to pods.
:func:`read_owners` reads what each owner leaves on the host, below a root (``/`` on a host, a recorded tree in
tests); :func:`owner_conflicts` is the one judgement of it. Standard library only (Python 3.8+): the Ansible module
``gpu_owners`` ships this file to hosts as a module_utils.

What each owner leaves (the sources are the owners' own code):

- the host's driver (the ``nvidia_driver`` role's packages): the NVIDIA kernel module of the running kernel in
  ``/lib/modules/KERNEL/modules.dep`` (DKMS and the distributions' module packages run depmod);
- the GPU Operator's driver container: its root file system bind-mounted at ``/run/nvidia/driver`` (the operator's
  ``hostPaths.driverInstallDir``, gpu-operator v26.7.0 deployments/gpu-operator/values.yaml; the container's
  ``_mount_rootfs``) and its lock file ``/run/nvidia/nvidia-driver.pid`` (``PID_FILE=${RUN_DIR}/${0##*/}.pid``), both
  removed when it stops (NVIDIA/gpu-driver-container ubuntu24.04/nvidia-driver);
- the device plugin: its kubelet socket ``/var/lib/kubelet/device-plugins/nvidia-<resource>.sock``, ``nvidia-gpu.sock``
  for ``nvidia.com/gpu``, ``nvidia-mig-1g.10gb.sock`` with the mixed MIG strategy (NVIDIA/k8s-device-plugin
  internal/plugin/server.go: ``pluginapi.DevicePluginPath + "nvidia-" + name + ".sock"``);
- the DRA driver's GPU kubelet plugin: its registration socket ``/var/lib/kubelet/plugins_registry/
  gpu.nvidia.com-reg.sock`` (``<driver name>-reg.sock``, ``<driver name>-<uid>-reg.sock`` with rolling updates:
  kubernetes-sigs/dra-driver-nvidia-gpu cmd/gpu-kubelet-plugin/main.go ``DriverName``, health.go, and the vendored
  k8s.io/dynamic-resource-allocation kubeletplugin/draplugin.go, at commit 9593204 of 2026-08-07).
"""

from __future__ import annotations

import glob
import os
from typing import Any

DRIVER = "driver"
ADVERTISER = "advertiser"

# The owners gpufleet knows, by the name a plan gives them: driver owners (the nvidia_driver role, the GPU
# Operator) and advertisers (as the stack's `advertiser:` names them)
HOST_DRIVER = "host"
OPERATOR_DRIVER = "gpu-operator"
DEVICE_PLUGIN = "device-plugin"
DRA = "dra"
NO_ADVERTISER = "none"
CONCERNS = {HOST_DRIVER: DRIVER, OPERATOR_DRIVER: DRIVER, DEVICE_PLUGIN: ADVERTISER, DRA: ADVERTISER}
LABELS = {
    HOST_DRIVER: "the host's NVIDIA driver",
    OPERATOR_DRIVER: "the GPU Operator's driver container",
    DEVICE_PLUGIN: "the device plugin",
    DRA: "the DRA kubelet plugin",
}
PLANNED = {HOST_DRIVER: "the host's (the nvidia_driver role)", OPERATOR_DRIVER: "the GPU Operator's"}

# The kernel module file names of the host's driver (gpufleet.host.driver's plans: Debian renames nvidia.ko)
NVIDIA_MODULES = ("nvidia", "nvidia-current-open", "nvidia-current")
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
OPERATOR_DRIVER_PID = "/run/nvidia/nvidia-driver.pid"
KUBELET_DIR = "/var/lib/kubelet"
DEVICE_PLUGIN_SOCKETS = "device-plugins/nvidia-*.sock"
DRA_REGISTRATIONS = ("plugins_registry/gpu.nvidia.com-reg.sock", "plugins_registry/gpu.nvidia.com-*-reg.sock")


def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _host_modules(root: str, kernel: str) -> list[str]:
    """The NVIDIA driver modules modules.dep of ``kernel`` lists, as host paths."""
    base = f"/lib/modules/{kernel}"
    try:
        with open(_under(root, f"{base}/modules.dep"), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        path = line.split(":", 1)[0].strip()
        name = os.path.basename(path).split(".ko", 1)[0]
        if path and name in NVIDIA_MODULES:
            found.append(path if path.startswith("/") else f"{base}/{path}")
    return found


def _mount_points(root: str) -> list[str]:
    """The mount points ``proc/mounts`` lists (octal escapes such as ``\\040`` decoded)."""
    try:
        with open(_under(root, "/proc/mounts"), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    points = []
    for line in lines:
        fields = line.split()
        if len(fields) > 1:
            points.append(fields[1].encode("latin-1", "replace").decode("unicode_escape"))
    return points


def _matches(root: str, directory: str, patterns: Any) -> list[str]:
    """Host paths of the entries of ``directory`` (a host path) whose names match one of ``patterns``."""
    found = []
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        for path in sorted(glob.glob(_under(root, f"{directory}/{pattern}"))):
            if not os.path.isdir(path):
                found.append(f"{directory}/{os.path.relpath(path, _under(root, directory))}")
    return list(dict.fromkeys(found))


def read_owners(root: str = "/", kernel: str = "", kubelet_dir: str = KUBELET_DIR) -> dict[str, list[dict[str, str]]]:
    """What the host shows of each owner: ``{concern: [{owner, evidence}]}`` with ``evidence`` the host paths that
    show it (``driver``: the host's module for ``kernel``, the GPU Operator's driver root; ``advertiser``: the device
    plugin's sockets, the DRA kubelet plugin's registration). An owner that leaves nothing is not listed."""
    seen: dict[str, list[dict[str, str]]] = {DRIVER: [], ADVERTISER: []}

    def add(owner: str, evidence: list[str]) -> None:
        if evidence:
            seen[CONCERNS[owner]].append({"owner": owner, "evidence": ", ".join(evidence)})

    add(HOST_DRIVER, _host_modules(root, kernel) if kernel else [])
    operator = [f"{OPERATOR_DRIVER_ROOT} mounted"] if OPERATOR_DRIVER_ROOT in _mount_points(root) else []
    operator += [OPERATOR_DRIVER_PID] if os.path.isfile(_under(root, OPERATOR_DRIVER_PID)) else []
    add(OPERATOR_DRIVER, operator)
    add(DEVICE_PLUGIN, _matches(root, kubelet_dir, DEVICE_PLUGIN_SOCKETS))
    add(DRA, _matches(root, kubelet_dir, DRA_REGISTRATIONS))
    return seen


def _shown(entry: dict[str, str]) -> str:
    owner = str(entry.get("owner", ""))
    return f"{LABELS.get(owner, owner)} ({entry.get('evidence', '')})"


def _verb(concern: str, many: bool) -> str:
    if concern == ADVERTISER:
        return "are registered" if many else "is registered"
    return "own the driver" if many else "owns the driver"


def owner_conflicts(seen: dict[str, Any], expected: dict[str, str | None]) -> list[str]:
    """The conflicts between the owners a host shows (``seen``, :func:`read_owners`) and its host group's plan
    (``expected``: per concern the planned owner, ``none`` for no advertiser, None when the plan says nothing):
    two owners of one concern, always; one owner that is not the planned one. Empty when each concern has at most
    its planned owner. Each message names the owners and what showed them, e.g. ``advertiser: both the device
    plugin (...nvidia-gpu.sock) and the DRA kubelet plugin (...gpu.nvidia.com-reg.sock) are registered; the plan's
    advertiser is dra``."""
    problems = []
    for concern in (DRIVER, ADVERTISER):
        entries = [e for e in seen.get(concern) or [] if isinstance(e, dict)]
        planned = expected.get(concern)
        plan = f"the plan's {concern} is {PLANNED.get(planned, planned)}" if planned else ""
        if len(entries) > 1:
            shown = [_shown(e) for e in entries]
            names = (
                f"both {shown[0]} and {shown[1]}" if len(shown) == 2 else ", ".join(shown[:-1]) + f" and {shown[-1]}"
            )
            problems.append(f"{concern}: {names} {_verb(concern, True)}" + (f"; {plan}" if plan else ""))
        elif entries and planned and entries[0].get("owner") != planned:
            problems.append(f"{concern}: {_shown(entries[0])} {_verb(concern, False)}; {plan}")
    return problems
