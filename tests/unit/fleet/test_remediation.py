"""gpufleet.fleet.remediation: which Xids a host's kernel logged, what the policy does about them, and which hosts the
limits let remediate.yml take out of service (max_hosts_at_once per host group, never the last healthy host)."""

from __future__ import annotations

from gpufleet.fleet.remediation import (
    HostHealth,
    Policy,
    after_action,
    decide,
    host_health,
    incomplete_groups,
    parse_xids,
    returned,
    xid_catalog,
)

# journalctl -k -o short-monotonic lines as the NVIDIA driver writes them (formats from NVIDIA's Xid documentation
# and driver logs: with and without pid, with the PCI: prefix)
LOG = """\
[ 5107.644336] gpu-7 kernel: NVRM: GPU at PCI:0000:41:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae
[ 5107.644400] gpu-7 kernel: NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off th\
e bus.
[ 6001.000001] gpu-7 kernel: NVRM: Xid (PCI:0000:c1:00): 13, pid=1896, name=python, Graphics Exception
"""


def _host(name: str, xids: tuple[int, ...] = (), group: str = "hgx", out: str | None = None) -> HostHealth:
    log = "".join(f"[ {100 + i}.0] {name} kernel: NVRM: Xid (PCI:0000:41:00): {x}, pid=1, test\n" for i, x in
                  enumerate(xids))  # fmt: skip
    return HostHealth(name, group, tuple(parse_xids(log)), out)


def test_the_drivers_xid_lines_are_read_with_gpu_code_and_time():
    events = parse_xids(LOG)
    assert [(e.pci, e.code, e.seconds) for e in events] == [
        ("0000:41:00", 79, 5107.6444),
        ("0000:c1:00", 13, 6001.000001),
    ]
    assert events[0].describe() == "Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) on 0000:41:00"


def test_actions_follow_nvidias_resolution_unless_the_stack_overrides():
    policy = Policy()
    assert xid_catalog()[79].resolution == "RESTART_BM" and policy.action(79) == "power-cycle"
    assert policy.action(95) == "gpu-reset"  # RESET_GPU
    assert policy.action(13) == "none"  # RESTART_APP: the application's fault, nothing on the host
    assert policy.action(48) == "cordon"  # WORKFLOW_XID_48: NVIDIA's investigation, for a person
    assert policy.action(4242) == "none"  # unknown to the catalog: reported only
    assert Policy(overrides={79: "reboot"}).action(79) == "reboot"
    assert policy.worst(parse_xids(LOG)) == "power-cycle"


def test_one_host_of_a_group_at_once_and_the_others_are_refused_with_the_limit():
    decisions = decide(Policy(max_hosts_at_once=1), [_host("b", (79,)), _host("a", (95,)), _host("c")])
    assert [(d.host, d.verdict, d.action) for d in decisions] == [
        ("a", "act", "gpu-reset"),
        ("b", "refuse", "power-cycle"),
        ("c", "leave", "none"),
    ]
    assert decisions[1].why.endswith("but max_hosts_at_once 1 of host group hgx already out of service: a")


def test_hosts_already_out_of_service_count_against_the_limit():
    decisions = decide(Policy(max_hosts_at_once=2), [_host("a", out="Xid 48"), _host("b", (79,)), _host("c", (79,)),
                                                      _host("d")])  # fmt: skip
    assert [d.verdict for d in decisions] == ["leave", "act", "refuse", "leave"]


def test_the_last_healthy_host_of_a_group_is_never_taken_out():
    decisions = decide(Policy(max_hosts_at_once=5), [_host("a", out="cordoned"), _host("b", (79,))])
    assert decisions[1].verdict == "refuse"
    assert decisions[1].why.endswith("but it is the last healthy host of host group hgx")
    (alone,) = decide(Policy(), [_host("solo", (79,))])
    assert alone.verdict == "refuse"


def test_limits_hold_per_host_group_and_xids_needing_nothing_are_reported():
    decisions = decide(Policy(), [_host("a", (79,), "g1"), _host("b", (79,), "g2"), _host("c", (13,), "g1"),
                                  _host("d", (), "g2"), _host("e", (), "g1")])  # fmt: skip
    assert {d.host: d.verdict for d in decisions} == {"a": "act", "c": "report", "e": "leave", "b": "act", "d": "leave"}


def test_a_group_with_hosts_outside_the_run_cannot_be_judged():
    problems = incomplete_groups(["a"], {"hgx": ["a", "b"], "other": ["x"]})
    assert problems == ["host group hgx has hosts outside this run (b): run ansible/remediate.yml on the whole group,"
                        " whose limits count every host of it"]  # fmt: skip


def test_xids_already_handled_in_this_boot_do_not_count_again():
    log = LOG
    assert len(host_health("h", "g", log, {"boot_id": "b1", "handled_through": 5200.0}, "b1").events) == 1
    assert len(host_health("h", "g", log, {"boot_id": "b0", "handled_through": 9999.0}, "b1").events) == 2


def test_after_a_power_cycle_without_new_xids_the_host_is_back_in_service_with_history():
    (decision,) = decide(Policy(), [_host("a", (79,)), _host("b")])[:1]
    state = after_action({}, decision.to_dict(), "old-boot", "", "new-boot", "2026-11-27T08:40:00+00:00")
    assert state["out_of_service"] is None and state["boot_id"] == "new-boot"
    assert state["history"][-1]["result"] == "power-cycle done, no new Xid: back in service"


def test_an_xid_again_after_the_action_keeps_the_host_out_of_service():
    (decision,) = decide(Policy(), [_host("a", (79,)), _host("b")])[:1]
    again = "[ 30.5] a kernel: NVRM: Xid (PCI:0000:41:00): 79, pid=1, GPU has fallen off the bus.\n"
    state = after_action({}, decision.to_dict(), "old-boot", again, "new-boot", "now")
    assert state["out_of_service"].startswith("Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) on 0000:41:00 again")


def test_a_cordon_keeps_the_host_out_until_a_person_returns_it():
    (decision,) = decide(Policy(), [_host("a", (48,)), _host("b")])[:1]
    state = after_action({}, decision.to_dict(), "b1", "", "b1", "now")
    assert "a person repairs it" in state["out_of_service"]
    back = returned(state, "[ 100.0] a kernel: NVRM: Xid (PCI:0000:41:00): 48, pid=1, DBE\n", "b1", "later")
    assert back["out_of_service"] is None and back["handled_through"] == 100.0
    assert host_health("a", "hgx", "[ 100.0] a kernel: NVRM: Xid (PCI:0000:41:00): 48, x\n", back, "b1").events == ()
