"""A stack's plan for Ansible: made once per stack file content, and seen from one host.

The ``gpufleet_plan`` lookup hands plays :func:`stack_view` (play keywords: rollout, the MIG host groups) and
:func:`host_view` (one host: its group's tuning profile, MIG layout, and each GPU chart's release with the host's
node labels). Both are plain data: the roles read variables and never re-plan.

:func:`plan_file` caches the plan of a stack file by the file's content (SHA-256), so the many lookups of one
``ansible-playbook`` run validate and plan each stack once; an edited file is planned again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpufleet.host.owners import HOST_DRIVER, OPERATOR_DRIVER
from gpufleet.kube import amd_operator
from gpufleet.kube.gpu_software import CHART_PINS, ChartRelease, label_patch
from gpufleet.mig.outputs import mig_parted_config
from gpufleet.plan.build import baremetal_releases, plan_stack
from gpufleet.plan.model import StackPlan, plain
from gpufleet.spec.models import TuningProfile

_PLANS: dict[tuple[str, str], StackPlan] = {}


class InvalidStackFile(ValueError):
    """The stack file does not validate; the message lists gpufleet's ``file:line: key: why`` diagnostics."""


def plan_file(path: Path) -> StackPlan:
    """The plan of the stack file ``path``, validated and planned once per content (:class:`InvalidStackFile` when
    it is invalid, :class:`OSError` when it cannot be read)."""
    from gpufleet.catalog import load_catalog
    from gpufleet.spec.load import load_stack_text

    text = path.read_text(encoding="utf-8")
    key = (str(path.resolve()), hashlib.sha256(text.encode()).hexdigest())
    if key not in _PLANS:
        catalog = load_catalog()
        loaded = load_stack_text(text, str(path), catalog=catalog)
        if loaded.stack is None or not loaded.ok:
            raise InvalidStackFile("invalid stack:\n" + "\n".join(str(d) for d in loaded.diagnostics))
        _PLANS[key] = plan_stack(loaded.stack, catalog)
    return _PLANS[key]


def clear_cache() -> None:
    """Forget every planned stack (tests that change what validation depends on, such as the date)."""
    _PLANS.clear()


def stack_view(plan: StackPlan) -> dict[str, Any]:
    """What a play of a bare-metal stack needs before it knows a host: names, release pins, inventory, rollout
    (``serial``, ``max_fail_percentage``, ``reboot_ok``), the remediation policy (``max_hosts_at_once``,
    ``xid_actions``: ansible/remediate.yml), what verify.yml requires (``verify``: ``dcgm_diag_level``, ``canaries``),
    the host groups (all, and those with a MIG layout) and the one mig-parted config of every layout
    (``all-disabled`` only, when no group has one)."""
    if plan.baremetal is None:
        raise ValueError(f"stack {plan.stack} has no bare-metal hosts (gpufleet:baremetal)")
    bm = plan.baremetal
    return {
        "stack": plan.stack,
        "stage": plan.stage,
        "region": plan.region,
        "release": dict(plan.release),
        "inventory": bm.inventory,
        "rollout": plain(bm.rollout),
        "remediation": plain(bm.remediation),
        "verify": {"dcgm_diag_level": bm.dcgm_diag_level, "canaries": list(bm.canaries)},
        "host_groups": [g.name for g in plan.host_groups],
        "mig_host_groups": [g.name for g in plan.host_groups if g.mig_layout],
        "mig_parted_config": bm.mig_parted_config or mig_parted_config([]),
    }


def _chart_view(plan: StackPlan, release: ChartRelease, labels: dict[str, str] | None) -> dict[str, Any]:
    amd = release.chart == amd_operator.AMD_GPU_OPERATOR_CHART
    patch = amd_operator.label_patch if amd else lambda labels: label_patch(release.chart, labels)
    return {
        "stack": plan.stack,
        "host_groups": [g.name for g in plan.host_groups],
        "chart": release.chart,
        "version": release.version,
        "repository": release.repository,
        "namespace": release.namespace,
        "values": release.values,
        # None: the host is in none of the stack's host groups (the roles stop there, naming them)
        "node_labels": labels,
        "label_patch": patch(labels) if labels is not None else None,
        # the AMD GPU Operator's DCM ConfigMap, which the release's values hold and which is created beside it
        **({"config_map": amd_operator.dcm_config_map(release)} if amd else {}),
    }


def host_view(
    plan: StackPlan,
    group_names: Iterable[str],
    *,
    driver_preinstalled: bool = True,
    toolkit_preinstalled: bool = True,
) -> dict[str, Any]:
    """:func:`stack_view` plus what one host in the inventory groups ``group_names`` gets from its host group
    (:meth:`StackPlan.host_group_of`): the tuning profile (the default one outside every group), the MIG layout
    (``""``: none), and per chart the release ``kubernetes.yml`` installs and the host's node labels. The flags say
    whether the host roles installed driver and toolkit (the GPU Operator's own daemonsets stay off; the AMD GPU
    Operator's driver likewise). With AMD host groups and ``release.amd_gpu_operator``, ``charts`` also has the AMD GPU
    Operator's release (``gpu-operator-charts``, with ``config_map``: its DCM ConfigMap or None). The owners the
    host must show (``verify``'s owners column): ``driver_owner`` (None on hosts without GPUs in their group) and
    ``advertiser``; ``compute_domains``: the DRA driver runs the IMEX daemons of ComputeDomains on the host, whose
    own ``nvidia-imex`` service the ``nvidia_driver`` role masks."""
    view = stack_view(plan)
    names = [str(n) for n in group_names]
    group = plan.host_group_of(names)
    assert plan.baremetal is not None
    releases = plan.baremetal.releases
    if not (driver_preinstalled and toolkit_preinstalled):
        releases = baremetal_releases(
            plan.release,
            plan.host_groups,
            plan.baremetal.mig_parted_config,
            driver_preinstalled=driver_preinstalled,
            toolkit_preinstalled=toolkit_preinstalled,
        )
    view |= {
        "group_names": names,
        "host_group": group.name if group is not None else None,
        "gpu_model": group.gpu_model if group is not None else None,
        "tuning": plain(group.tuning if group is not None else TuningProfile()),
        "mig_layout": group.mig_layout if group is not None else "",
        "virtualization": plain(group.virtualization) if group is not None and group.virtualization else None,
        "advertiser": group.advertiser if group is not None else None,
        "compute_domains": group is not None and group.compute_domains,
        "vendor": group.vendor if group is not None else None,
        # AMD Instinct partitions (the amd_partition role applies them where managed_by is host): {managed_by, profile,
        # memory, groups: [{compute, gpus}], skipped_gpus, logical_gpus, memory_gib}
        "amd_partitions": plain(group.amd_partitions) if group is not None and group.amd_partitions else None,
        # an AMD group's driver is always the amd_driver role's (the flags are NVIDIA's chart's)
        "driver_owner": (HOST_DRIVER if driver_preinstalled or group.vendor == "amd" else OPERATOR_DRIVER)
        if group is not None and group.gpu_model is not None
        else None,
        "charts": {
            chart: _chart_view(plan, releases[chart], group.node_labels.get(chart, {}) if group is not None else None)
            for chart in (*CHART_PINS, amd_operator.AMD_GPU_OPERATOR_CHART)
            if chart in releases
        },
    }
    return view
