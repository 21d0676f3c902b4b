"""AMD Instinct faults in gpufleet's remediation policy (gpufleet/fleet/remediation.py, catalog/amd_faults.yaml,
docs/remediation.md): each signal's action and its stated basis, the faults a host's RAS reading holds, and the
decisions they lead to within the same limits as Xids."""

from __future__ import annotations

import typing

from gpufleet.catalog.amd import AmdFaultSignal, load_amd_faults
from gpufleet.fleet.remediation import (
    AmdFault,
    HostHealth,
    Policy,
    amd_faults,
    decide,
    health_problems,
    parse_xids,
    xid_catalog,
)
from gpufleet.host.amd_ras import read_ras
from gpufleet.spec.types import Action
from tests.conftest import FIXTURES, REPO

RAS = FIXTURES / "amd-ras" / "mi300x-faults"


def test_amd_signals_map_onto_gpufleets_actions():
    policy = Policy()
    assert policy.amd_action("afid_fatal") == "reboot"
    assert policy.amd_action("afid_non_fatal_uncorrected") == "none"
    assert policy.amd_action("afid_non_fatal_corrected") == "none"
    assert policy.amd_action("ras_ue") == policy.action(48) == "cordon"  # NVIDIA's Xid 48: a person
    assert policy.amd_action("bad_page_failed") == "cordon"
    assert policy.amd_action("bad_page_pending") == "none"
    assert policy.amd_action("not_a_signal") == "none"  # unknown: reported only, like an unknown Xid


def test_uncorrectable_ecc_follows_the_stacks_override_of_xid_48_and_nothing_else_does():
    policy = Policy(overrides={48: "reboot", 79: "reboot"})
    assert policy.amd_action("ras_ue") == "reboot"
    assert policy.amd_action("afid_fatal") == "reboot" and policy.amd_action("bad_page_failed") == "cordon"
    assert Policy(overrides={48: "none"}).amd_action("ras_ue") == "none"


def test_the_catalog_states_its_basis_and_uses_the_policys_vocabulary():
    signals = load_amd_faults().signals
    assert {s.signal for s in signals} >= {"afid_fatal", "afid_non_fatal_uncorrected", "afid_non_fatal_corrected",
                                           "ras_ue", "bad_page_failed"}  # fmt: skip
    (literal, _none) = typing.get_args(AmdFaultSignal.model_fields["action"].annotation)  # Action | None
    assert typing.get_args(literal) == typing.get_args(Action)  # the catalog's copy of gpufleet.spec.types.Action
    for signal in signals:
        assert signal.amd and signal.why
        assert signal.like_xid is None or signal.like_xid in xid_catalog()
    text = (REPO / "gpufleet" / "catalog" / "amd_faults.yaml").read_text()
    assert "GPUFLEET'S JUDGEMENT, NOT AMD'S" in text and "not publicly distributed" in text


def test_a_hosts_ras_reading_holds_its_uncorrectable_errors_and_bad_pages():
    faults = amd_faults(read_ras(str(RAS)))
    assert [(f.pci, f.signal, f.detail) for f in faults] == [
        ("0000:26:00.0", "ras_ue", "umc ue 1"),
        ("0000:26:00.0", "bad_page_failed", "1 page failed: 0x00009abc"),
        ("0000:26:00.0", "bad_page_pending", "1 page pending: 0x00005678"),
    ]  # 0000:05:00.0 corrected errors and a retired page only; 0000:46:00.0 unreadable counts are no fault
    assert faults[0].describe() == "AMD ras_ue (umc ue 1) on 0000:26:00.0"


def test_amd_faults_are_decided_with_the_groups_limits_beside_xids():
    faulty = HostHealth("mi-a01", "mi300x", tuple(amd_faults(read_ras(str(RAS)))))
    pending = HostHealth("mi-a02", "mi300x", (AmdFault("0000:05:00.0", "bad_page_pending", "1 page pending: 0x1"),))
    fatal = HostHealth("mi-a03", "mi300x", (AmdFault("0000:05:00.0", "afid_fatal", "AFID 30"),))
    decisions = decide(Policy(max_hosts_at_once=1), [fatal, pending, faulty])
    assert [(d.host, d.verdict, d.action) for d in decisions] == [
        ("mi-a01", "act", "cordon"),  # ras_ue and bad_page_failed: a person
        ("mi-a02", "report", "none"),  # the driver retires the page itself
        ("mi-a03", "refuse", "reboot"),  # one host of the group is out already
    ]
    acted = decisions[0].to_dict()
    assert acted["xids"] == [] and acted["gpus"] == ["0000:26:00.0"] and acted["through"] == -1.0
    assert "AMD bad_page_failed (1 page failed: 0x00009abc) on 0000:26:00.0" in acted["events"]
    xid = HostHealth("gpu-1", "hgx", tuple(parse_xids("[ 1.0] k: NVRM: Xid (PCI:0000:41:00): 79, x\n")))
    assert Policy().worst((*xid.events, *fatal.events)) == "power-cycle"  # the strongest of both kinds


def test_verify_names_an_amd_fault_that_was_not_remediated():
    health = HostHealth("mi-a01", "mi300x", (AmdFault("0000:26:00.0", "ras_ue", "umc ue 1"),))
    problems, _ = health_problems(health, Policy(), {})
    assert problems == [
        "AMD ras_ue (umc ue 1) on 0000:26:00.0 calls for cordon, not done yet: run ansible/remediate.yml"
    ]
