"""Health remediation of bare-metal GPU hosts: which Xids a host logged, what the stack's policy does about them,
and which hosts may be taken out of service now (docs/remediation.md).

``ansible/remediate.yml`` reads each host's kernel log and gpufleet's remediation state on the host, hands them to
:func:`decide` (through the ``gpufleet_remediation_decide`` filter) and acts on the decisions: a host is taken out
of service, gets the action its Xids call for (GPU reset, reboot, power cycle through its BMC), and comes back into
service once no new Xid is logged. The limits hold across the whole host group: at most ``max_hosts_at_once`` of a
group out of service at once (those already out count), and never its last healthy host.

The actions follow NVIDIA's immediate resolution of each Xid (gpufleet/catalog/xids.yaml): RESTART_APP and IGNORE
need nothing on the host; RESET_GPU resets the GPU; RESTART_BM power-cycles the host through its BMC (a GPU that
fell off the PCIe bus, Xid 79, is often not found again after a warm reboot, its slot never losing power), and
every other resolution (NVIDIA's investigation workflows, a report to NVIDIA, a mechanical check) takes the host out
of service for a person. A stack can override the action of any Xid the catalog knows.

AMD Instinct GPUs log no Xids; their faults are signals (gpufleet/catalog/amd_faults.yaml): a CPER record's severity
(the AFID's), uncorrectable ECC counts, VRAM pages the driver could not retire. :func:`amd_faults` turns a host's RAS
reading (:mod:`gpufleet.host.amd_ras`) into :class:`AmdFault` events, which :func:`decide` weighs beside Xids with the
same limits; their actions are gpufleet's judgement (AMD's Service Action Guide is not public), an uncorrectable ECC
error taking whatever the policy gives Xid 48.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, get_args

from gpufleet.spec.types import Action

if TYPE_CHECKING:
    from gpufleet.spec.models import Remediation

ACTIONS: tuple[Action, ...] = get_args(Action)  # mildest first
RECOVERING: frozenset[Action] = frozenset({"gpu-reset", "reboot", "power-cycle"})  # brings the host back itself
# NVIDIA's immediate resolution -> gpufleet's action (anything else: cordon, for a person)
BY_RESOLUTION: dict[str, Action] = {
    "RESTART_APP": "none",
    "IGNORE": "none",
    "RESET_GPU": "gpu-reset",
    "RESTART_BM": "power-cycle",
}

# The driver's kernel log line: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." Plain
# regular expression syntax that Go's RE2 reads alike: node-problem-detector matches its rules with it
# (gpufleet.kube.node_remediation).
XID_PREFIX = r"NVRM: Xid \((?:PCI:)?"
PCI_ADDRESS = r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
_XID_RE = re.compile(XID_PREFIX + rf"(?P<pci>{PCI_ADDRESS})\): (?P<code>\d+)(?:, (?P<text>.*))?")
# journalctl -o short-monotonic: "[  123.456789] host kernel: ..."
_MONOTONIC_RE = re.compile(r"^\[\s*(?P<seconds>\d+\.\d+)\]")


@dataclass(frozen=True)
class Xid:
    """One Xid of the catalog: NVIDIA's mnemonic and immediate resolution."""

    code: int
    mnemonic: str
    resolution: str
    fatal: bool


@lru_cache(maxsize=1)
def xid_catalog() -> dict[int, Xid]:
    """The Xids gpufleet knows (gpufleet/catalog/xids.yaml), by code."""
    from gpufleet.catalog import read_catalog_yaml

    return {int(x["code"]): Xid(int(x["code"]), x["mnemonic"], x["resolution"], bool(x["fatal"]))
            for x in read_catalog_yaml("xids.yaml")["xids"]}  # fmt: skip


@dataclass(frozen=True)
class XidEvent:
    """An Xid the NVIDIA driver logged: the GPU's PCI address, the code, the driver's words, and when (seconds since
    boot, from the kernel log's monotonic clock; None when the line carries no time)."""

    pci: str
    code: int
    text: str
    seconds: float | None = None

    def describe(self) -> str:
        known = xid_catalog().get(self.code)
        name = known.mnemonic if known else "not in gpufleet's Xid catalog"
        return f"Xid {self.code} ({name}) on {self.pci}"


def parse_xids(kernel_log: str) -> list[XidEvent]:
    """The Xid events of a kernel log (``journalctl -k -o short-monotonic`` or ``dmesg`` output), in order."""
    events = []
    for line in kernel_log.splitlines():
        m = _XID_RE.search(line)
        if m is None:
            continue
        t = _MONOTONIC_RE.match(line)
        events.append(
            XidEvent(m["pci"].lower(), int(m["code"]), (m["text"] or "").strip(), float(t["seconds"]) if t else None)
        )
    return events


@dataclass(frozen=True)
class AmdFault:
    """A fault an AMD GPU reported: the GPU's PCI address, the signal (amd_faults.yaml: ``ras_ue``,
    ``bad_page_failed``, ``afid_fatal``...) and what was read (``umc ue 1``); ``seconds`` None (no kernel-log time)."""

    pci: str
    signal: str
    detail: str
    seconds: float | None = None

    def describe(self) -> str:
        return f"AMD {self.signal} ({self.detail}) on {self.pci}"


Event = XidEvent | AmdFault


def amd_faults(reading: Mapping[str, Any]) -> list[AmdFault]:
    """The fault events of a host's RAS reading (:func:`gpufleet.host.amd_ras.read_ras`'s ``{gpus: [...]}``, as plain
    data): per GPU, its uncorrectable ECC counts (``ras_ue``), its bad pages the driver could not reserve
    (``bad_page_failed``) or has not yet (``bad_page_pending``). Corrected and deferred counts are no event."""
    faults = []
    for gpu in reading.get("gpus") or []:
        pci = str(gpu.get("pci", "?"))
        counters = gpu.get("counters") or {}
        ue = [f"{block} ue {c['ue']}" for block, c in sorted(counters.items()) if int(c.get("ue", 0)) > 0]
        if ue:
            faults.append(AmdFault(pci, "ras_ue", ", ".join(ue)))
        pages = gpu.get("bad_pages") or []
        for flag, signal in (("failed", "bad_page_failed"), ("pending", "bad_page_pending")):
            hit = [p["pfn"] for p in pages if p.get("flag") == flag]
            if hit:
                listed = ", ".join(hit[:4]) + (", ..." if len(hit) > 4 else "")
                faults.append(AmdFault(pci, signal, f"{len(hit)} page{'s' if len(hit) != 1 else ''} {flag}: {listed}"))
    return faults


@dataclass(frozen=True)
class Policy:
    """A stack's remediation policy: the action per Xid (the catalog's default, or the stack's override) and the
    group limit."""

    max_hosts_at_once: int = 1
    overrides: Mapping[int, Action] = field(default_factory=dict)

    def action(self, code: int) -> Action:
        if code in self.overrides:
            return self.overrides[code]
        known = xid_catalog().get(code)
        if known is None:
            return "none"  # an Xid gpufleet does not know: reported, not acted on
        return BY_RESOLUTION.get(known.resolution, "cordon")

    def amd_action(self, signal: str) -> Action:
        """An AMD fault signal's action (gpufleet/catalog/amd_faults.yaml): its own, or the one this policy gives the
        Xid it follows (``ras_ue``: Xid 48's); ``none`` for a signal the catalog does not know."""
        from gpufleet.catalog.amd import load_amd_faults

        known = load_amd_faults().signal(signal)
        if known is None:
            return "none"
        if known.like_xid is not None:
            return self.action(known.like_xid)
        assert known.action is not None
        return known.action

    def action_of(self, event: Event) -> Action:
        return self.action(event.code) if isinstance(event, XidEvent) else self.amd_action(event.signal)

    def worst(self, events: Iterable[Event]) -> Action:
        """The strongest action the events call for (``none`` without events)."""
        return max((self.action_of(e) for e in events), key=ACTIONS.index, default="none")


def policy_from(spec: Remediation) -> Policy:
    """The :class:`Policy` of a stack's ``baremetal.remediation``."""
    return Policy(spec.max_hosts_at_once, {int(k): v for k, v in spec.xid_actions.items()})


@dataclass(frozen=True)
class HostHealth:
    """What remediate.yml read on one host: its host group, the Xids logged since its last remediation, and whether
    gpufleet already took it out of service (and why)."""

    host: str
    group: str
    events: tuple[Event, ...] = ()  # Xids, and an AMD host's faults (amd_faults)
    out_of_service: str | None = None  # the reason, when out of service


@dataclass(frozen=True)
class Decision:
    """What happens to one host: ``act`` (take it out of service and run ``action``), ``refuse`` (a limit holds it
    back; ``why`` says which), ``report`` (Xids that need nothing on the host) or ``leave`` (already out of service,
    or nothing logged)."""

    host: str
    group: str
    verdict: Literal["act", "refuse", "report", "leave"]
    action: Action
    why: str
    events: tuple[Event, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "group": self.group,
            "verdict": self.verdict,
            "action": self.action,
            "why": self.why,
            "xids": sorted({e.code for e in self.events if isinstance(e, XidEvent)}),
            "events": [e.describe() for e in self.events],
            "gpus": sorted({e.pci for e in self.events}),
            # the kernel-log time of the last Xid handled (a GPU reset keeps the boot: older lines do not count again)
            "through": max((e.seconds for e in self.events if e.seconds is not None), default=-1.0),
        }


def _limit(policy: Policy, out: Sequence[str], healthy: int, group: str) -> str | None:
    if len(out) >= policy.max_hosts_at_once:
        return (f"max_hosts_at_once {policy.max_hosts_at_once} of host group {group} already out of service:"
                f" {', '.join(out)}")  # fmt: skip
    if healthy <= 1:
        return f"it is the last healthy host of host group {group}"
    return None


def _decide_group(policy: Policy, group: str, hosts: Sequence[HostHealth]) -> list[Decision]:
    out = [h.host for h in hosts if h.out_of_service]
    healthy = len(hosts) - len(out)
    decisions = []
    for h in sorted(hosts, key=lambda h: h.host):
        action = policy.worst(h.events)
        described = "; ".join(e.describe() for e in h.events)
        if h.out_of_service:
            decisions.append(Decision(h.host, group, "leave", action, f"out of service: {h.out_of_service}", h.events))
        elif not h.events:
            decisions.append(Decision(h.host, group, "leave", "none", "no Xid logged", ()))
        elif action == "none":
            decisions.append(Decision(h.host, group, "report", "none", f"{described}: nothing to do on the host",
                                      h.events))  # fmt: skip
        elif (why := _limit(policy, out, healthy, group)) is not None:
            decisions.append(Decision(h.host, group, "refuse", action, f"{described} calls for {action}, but {why}",
                                      h.events))  # fmt: skip
        else:
            decisions.append(Decision(h.host, group, "act", action, f"{described} calls for {action}", h.events))
            out.append(h.host)
            healthy -= 1
    return decisions


def decide(policy: Policy, hosts: Iterable[HostHealth]) -> list[Decision]:
    """The decision for every host, host group by host group (hosts of a group in name order: the first ones with
    Xids are taken out of service while the limits allow)."""
    groups: dict[str, list[HostHealth]] = {}
    for h in hosts:
        groups.setdefault(h.group, []).append(h)
    return [d for group in sorted(groups) for d in _decide_group(policy, group, groups[group])]


def host_health(host: str, group: str, kernel_log: str, state: Mapping[str, Any] | None, boot_id: str) -> HostHealth:
    """A host's :class:`HostHealth` from its kernel log of this boot and gpufleet's state file on it (``{boot_id,
    handled_through, out_of_service}``): Xids of this boot at or before ``handled_through`` seconds were already
    remediated and do not count again."""
    state = state or {}
    handled = float(state.get("handled_through", -1.0)) if state.get("boot_id") == boot_id else -1.0
    events = tuple(e for e in parse_xids(kernel_log) if e.seconds is None or e.seconds > handled)
    return HostHealth(host, group, events, state.get("out_of_service") or None)


def load_state(text: str | None) -> dict[str, Any]:
    """gpufleet's remediation state on a host (``/var/lib/gpufleet/remediation.json``); ``{}`` when there is none
    or it is not JSON (a host never remediated)."""
    import json

    try:
        data = json.loads(text or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def incomplete_groups(play_hosts: Sequence[str], members: Mapping[str, Sequence[str]]) -> list[str]:
    """Why the limits cannot be judged: a host group with hosts outside this run (the limits count every host of a
    group, and only a host in the run can be read)."""
    play = set(play_hosts)
    problems = []
    for group, hosts in sorted(members.items()):
        if play & set(hosts) and (missing := sorted(set(hosts) - play)):
            problems.append(
                f"host group {group} has hosts outside this run ({', '.join(missing)}): run ansible/remediate.yml"
                " on the whole group, whose limits count every host of it"
            )
    return problems


def render(decisions: Sequence[Decision]) -> list[str]:
    """The decisions as lines a person reads: one per host."""
    if not decisions:
        return ["gpufleet remediate: no host"]
    width = max(len(d.host) for d in decisions)
    lines = [f"gpufleet remediate: {sum(d.verdict == 'act' for d in decisions)} to act on,"
             f" {sum(d.verdict == 'refuse' for d in decisions)} refused"]  # fmt: skip
    lines += [f"  {d.host.ljust(width)}  {d.verdict:<6}  {d.why}" for d in decisions]
    return lines


def health_problems(health: HostHealth, policy: Policy, state: Mapping[str, Any]) -> tuple[list[str], str]:
    """verify.yml's health check of one host: the problems (out of service; an Xid that calls for an action and
    was not remediated) and a note for the report (the last remediation, when the host has one)."""
    problems = []
    if health.out_of_service:
        problems.append(f"out of service: {health.out_of_service} (ansible/remediate.yml brings it back)")
    for event in health.events:
        if (action := policy.action_of(event)) != "none":
            problems.append(f"{event.describe()} calls for {action}, not done yet: run ansible/remediate.yml")
    history = [h for h in state.get("history") or [] if isinstance(h, dict)]
    acted = [h for h in history if h.get("action") != "none"]
    note = ""
    if acted:
        last = acted[-1]
        note = f"last remediation {last.get('time', '?')}: {last.get('why', '?')}; {last.get('result', '?')}"
    if history and history[-1].get("action") == "none":  # a person returned it since
        note = "; ".join(filter(None, [note, f"{history[-1].get('why', '?')} {history[-1].get('time', '?')}"]))
    return problems, note


HISTORY = 20  # remediations kept in a host's state file


def _history(state: Mapping[str, Any], entry: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(state.get("history") or []), entry][-HISTORY:]


def taken_out(state: Mapping[str, Any], decision: Mapping[str, Any], boot_id: str, now: str) -> dict[str, Any]:
    """The host's state once remediate.yml takes it out of service, before the action."""
    return {**state, "boot_id": boot_id, "out_of_service": f"{decision['why']} (since {now})"}


def after_action(
    state: Mapping[str, Any], decision: Mapping[str, Any], old_boot: str, kernel_log: str, boot_id: str, now: str
) -> dict[str, Any]:
    """The host's state after its action: back in service when it logged no new Xid since (a new boot's Xids are
    all new; in the same boot, those after the handled ones), still out of service otherwise; ``cordon`` keeps it
    out for a person. The remediation goes into the host's history, which verify.yml reports."""
    through = float(decision["through"]) if boot_id == old_boot else -1.0
    again = host_health("", "", kernel_log, {"boot_id": boot_id, "handled_through": through}, boot_id).events
    action = decision["action"]
    if action not in RECOVERING:
        out: str | None = (
            f"{decision['why']}: a person repairs it, then remediate.yml -e gpufleet_remediation_return=HOST"
        )
        result = "out of service until repaired"
    elif again:
        out = f"{'; '.join(e.describe() for e in again)} again after {action} (since {now})"
        result = f"still failing after {action}: out of service"
    else:
        out, result = None, f"{action} done, no new Xid: back in service"
    entry = {"time": now, "why": decision["why"], "action": action, "result": result}
    return {"boot_id": boot_id, "handled_through": through, "out_of_service": out, "history": _history(state, entry)}


def returned(state: Mapping[str, Any], kernel_log: str, boot_id: str, now: str) -> dict[str, Any]:
    """The host's state when a person brings it back into service: this boot's Xids so far count as handled."""
    seen = [e.seconds for e in parse_xids(kernel_log) if e.seconds is not None]
    entry = {"time": now, "why": "returned by a person", "action": "none", "result": "back in service"}
    return {"boot_id": boot_id, "handled_through": max(seen, default=-1.0), "out_of_service": None,
            "history": _history(state, entry)}  # fmt: skip
