"""The NUMA planner: its invariants on every recorded machine and on generated topologies, and its refusals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from gpufleet.catalog import load_catalog
from gpufleet.host.hostfacts import parse_cpulist, read_host
from gpufleet.host.topology import TopologyError, node_reserve_mib, plan
from gpufleet.spec.load import load_stack
from gpufleet.spec.models import CoresPerGpu, TuningProfile
from tests.conftest import FIXTURES, REPO

HOSTS = FIXTURES / "hosts"
LAB_STACK = load_stack(REPO / "Pulumi.lab-local.yaml").stack
LAB_PROFILE = LAB_STACK.tuning_profile("lab")
CATALOG_MAP = load_catalog().gpus_by_pci_id
# a profile for each recorded machine beside the default one (test_the_default_profile_plans_every_recorded_machine)
PROFILES = {
    "dgx-h100": TuningProfile(hugepages_1g_per_gpu=8, vfs_per_nic=8, isolation=True),
    "dgx-a100": TuningProfile(cores_per_gpu=7, hugepages_1g_per_node=4, vfs_per_nic=8),
    "hgx-h200": TuningProfile(cores_per_gpu=8, reserved_cores=4, hugepages_2m_per_node=4096),
    "hgx-h100-epyc-nps1": TuningProfile(hugepages_1g_per_gpu=16, vfs_per_nic=8),
    "hgx-h100-epyc-nps2": TuningProfile(cores_per_gpu={"min": 6, "max": 12}, reserved_cores=8, isolation=True),
    "hgx-h100-epyc-nps4": TuningProfile(cores_per_gpu=4, reserved_cores=0, hugepages_1g_per_node=8),
    "workstation-l40s": TuningProfile(cores_per_gpu=6, vfs_per_nic=32, hugepages_1g_per_gpu=16),
    "no-gpu": TuningProfile(hugepages_1g_per_node=64, vfs_per_nic=64),
    "numa-unknown": TuningProfile(cores_per_gpu=6, hugepages_1g_per_node=16, vfs_per_nic=4),
    "mi300x-epyc": TuningProfile(cores_per_gpu=12, hugepages_1g_per_gpu=16, vfs_per_nic=8),  # a TEST DOUBLE's tree
    # recorded from a lab VM (record.sh), planned with the lab stack's own profile
    "lab-vm": LAB_PROFILE,
    "lab-vm-tuned": LAB_PROFILE,
}


def quantity_mib(q: str) -> int:
    m = re.fullmatch(r"(\d+)(Mi|Gi)?", q)
    assert m, q
    return int(m[1]) * (1024 if m[2] == "Gi" else 1) if m[2] else int(m[1])


def assert_invariants(facts: dict, p, profile: TuningProfile) -> None:
    cpu_node = {cpu: n["id"] for n in facts["numa_nodes"] for cpu in n["cpus"]}
    core_of = {cpu: tuple(c["cpus"]) for c in facts["cores"] for cpu in c["cpus"]}
    seen: set[int] = set()
    for gpu in p.gpus:
        cpus = set(gpu.cpus)
        # whole cores: every core is in the set entirely, SMT siblings together
        assert all(set(core_of[c]) <= cpus for c in cpus), gpu
        assert profile.cores_per_gpu.min <= len({core_of[c] for c in cpus}) <= profile.cores_per_gpu.max, gpu
        # on the GPU's node (when that node has CPUs)
        if any(n == gpu.numa_node for n in cpu_node.values()):
            assert {cpu_node[c] for c in cpus} == {gpu.numa_node}, gpu
        # no CPU in two sets
        assert not cpus & seen, gpu
        seen |= cpus
    reserved = set(p.reserved_cpus)
    assert not reserved & seen
    assert all(set(core_of[c]) <= reserved for c in reserved)
    assert_fair_cpu_split(facts, p, profile)
    assert set(p.isolated_cpus) == (seen if profile.isolation else set())
    # hugepages per node fit the node, less its reserve
    for node in facts["numa_nodes"]:
        memory_mib = node["memory_kib"] // 1024
        huge = sum(h["count"] * h["size_kib"] // 1024 for h in p.hugepages if h["numa_node"] == node["id"])
        if huge:
            assert huge <= memory_mib - node_reserve_mib(memory_mib), node["id"]
    # memory manager: reservedMemory sums exactly to kube-reserved + system-reserved + eviction-hard, per resource
    k = p.kubelet
    wanted = (
        quantity_mib(k["kubeReserved"]["memory"])
        + quantity_mib(k["systemReserved"]["memory"])
        + quantity_mib(k["evictionHard"]["memory.available"])
    )
    assert sum(quantity_mib(r["limits"]["memory"]) for r in k["reservedMemory"]) == wanted
    for resource in {key for r in k["reservedMemory"] for key in r["limits"] if key.startswith("hugepages-")}:
        total = sum(quantity_mib(r["limits"].get(resource, "0")) for r in k["reservedMemory"])
        assert total == quantity_mib(k["kubeReserved"].get(resource, "0")) + quantity_mib(
            k["systemReserved"].get(resource, "0")
        )
    assert set(parse_cpulist(k["reservedSystemCPUs"])) == reserved
    # SR-IOV within each device's limit
    for dev in p.sriov:
        assert 0 < dev["numvfs"] == profile.vfs_per_nic <= dev["totalvfs"]
    # kernel arguments follow the IOMMU the firmware describes (else the CPU vendor) and the kernel version
    args = p.kernel_args
    if p.sriov or any(g["vendor"] == "1002" for g in facts["gpus"]):  # SR-IOV, or AMD's pass-through for its GPUs
        iommu = facts.get("iommu")  # generated facts have none: the CPU vendor decides
        intel = iommu == "intel" or (iommu is None and facts["cpu_vendor"] == "GenuineIntel")
        expected = ["intel_iommu=on", "iommu=pt"] if intel else ["iommu=pt"]
        assert [a for a in args if "iommu" in a] == expected
    else:
        assert not [a for a in args if "iommu" in a]
    huge_arg = next((a for a in args if a.startswith("hugepages=")), None)
    ones = [h for h in p.hugepages if h["size_kib"] == 1048576]
    if ones:
        version = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", facts["kernel"]).groups())
        total = sum(h["count"] for h in ones)
        if version >= (5, 16):
            assert huge_arg == "hugepages=" + ",".join(f"{h['numa_node']}:{h['count']}" for h in ones)
        else:
            assert huge_arg == f"hugepages={total}"
        assert args[:2] == ["default_hugepagesz=1G", "hugepagesz=1G"]
    else:
        assert huge_arg is None
    assert any(a.startswith("isolcpus=") for a in args) == bool(p.isolated_cpus)
    assert len(p.gres_conf) == len(p.gpus)


def assert_fair_cpu_split(facts: dict, p, profile: TuningProfile) -> None:
    """The adaptive profile's rules: as many system cores as asked, from nodes without GPUs first; the GPUs of a node
    share what is left there equally, each as much as the range allows (none could get one more)."""
    core_of = {cpu: tuple(c["cpus"]) for c in facts["cores"] for cpu in c["cpus"]}
    cores_of_node: dict[int, set] = {}
    for core in facts["cores"]:
        cores_of_node.setdefault(core["numa_node"] if core["numa_node"] is not None else 0, set()).add(
            tuple(core["cpus"])
        )
    reserved_cores = {core_of[c] for c in p.reserved_cpus}
    wanted = profile.reserved_cores if profile.reserved_cores is not None else len(cores_of_node)
    assert len(reserved_cores) == wanted
    gpu_nodes = {g.numa_node for g in p.gpus}
    if any(core_of[c] in cores_of_node.get(n, set()) for n in gpu_nodes for c in p.reserved_cpus):
        for n, cores in cores_of_node.items():  # a GPU node gave system cores: the others had none left
            if n not in gpu_nodes:
                assert cores <= reserved_cores, n
    for node in p.numa_nodes:
        if not node.cores_per_gpu:
            continue
        takers = [g for g in p.gpus if {core_of[c] for c in g.cpus} <= cores_of_node[node.id]]
        assert {len({core_of[c] for c in g.cpus}) for g in takers} == {node.cores_per_gpu}, node.id
        left = len(cores_of_node[node.id] - reserved_cores) - node.cores_per_gpu * len(takers)
        assert node.cores_per_gpu == profile.cores_per_gpu.max or left < len(takers), node.id
        assert node.choice.startswith(f"{len(cores_of_node[node.id])} cores, "), node.choice


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_invariants_on_every_recorded_machine(name: str):
    facts = read_host(str(HOSTS / name), CATALOG_MAP)
    p = plan(facts, PROFILES[name], name)
    assert_invariants(facts, p, PROFILES[name])


def test_every_recorded_machine_has_a_profile():
    recorded = {d.name for d in HOSTS.iterdir() if d.is_dir()}
    assert recorded == set(PROFILES)


def test_dgx_h100_plan_pairs_each_gpu_with_its_nic_and_node():
    facts = read_host(str(HOSTS / "dgx-h100"), CATALOG_MAP)
    p = plan(facts, PROFILES["dgx-h100"], "dgx")
    nics = {n["pci"]: n["interfaces"][0] for n in facts["nics"]}
    assert [(g.numa_node, nics[g.nics[0]]) for g in p.gpus] == [
        (0, "ibp24s0"), (0, "ibp64s0"), (0, "ibp79s0"), (0, "ibp94s0"),
        (1, "ibp154s0"), (1, "ibp192s0"), (1, "ibp206s0"), (1, "ibp220s0"),
    ]  # fmt: skip
    assert p.kubelet["topologyManagerPolicy"] == "single-numa-node"
    # kernel 5.15: 1 GiB pages as a total; 8 GPUs x 8 pages
    assert "hugepages=64" in p.kernel_args
    assert {h["numa_node"]: h["count"] for h in p.hugepages} == {0: 32, 1: 32}
    assert p.gres_conf[4] == "Name=gpu Type=h100-sxm5-80gb File=/dev/nvidia4 Cores=56-111"


def test_iommu_arguments_for_vm_hosts_without_sriov_follow_the_firmwares_iommu():
    facts = read_host(str(HOSTS / "dgx-h100"), CATALOG_MAP)  # Intel CPUs, no SR-IOV plan, no ACPI tables recorded
    assert facts["iommu"] is None
    assert not [a for a in plan(facts, TuningProfile(), "dgx").kernel_args if "iommu" in a]
    vm_host = plan(facts, TuningProfile(), "dgx", vms=True)
    assert vm_host.kernel_arg_groups["iommu"] == ["intel_iommu=on", "iommu=pt"]
    amd_iommu = plan(facts | {"iommu": "amd"}, TuningProfile(), "dgx", vms=True)
    assert amd_iommu.kernel_arg_groups["iommu"] == ["iommu=pt"]  # AMD-Vi is on by default


def test_per_node_hugepages_on_new_kernels_and_iommu_on_amd():
    facts = read_host(str(HOSTS / "workstation-l40s"), CATALOG_MAP)  # kernel 6.1, AMD
    p = plan(facts, PROFILES["workstation-l40s"], "ws")
    assert "hugepages=0:32" in p.kernel_args
    assert "iommu=pt" in p.kernel_args and "intel_iommu=on" not in p.kernel_args
    assert p.sriov_device_plugin == {
        "resourceList": [
            {
                "resourceName": "ethernet_numa0",
                "deviceType": "netDevice",
                "selectors": {"vendors": ["8086"], "pfNames": ["enp33s0f0", "enp33s0f1"]},
            }
        ]
    }


def test_unknown_numa_on_a_one_node_host_uses_that_node_and_says_so():
    facts = read_host(str(HOSTS / "numa-unknown"), CATALOG_MAP)
    assert all(g["numa_node"] is None for g in facts["gpus"])
    p = plan(facts, PROFILES["numa-unknown"], "n1")
    assert {g.numa_node for g in p.gpus} == {0}
    assert any("reports no NUMA node" in n for n in p.notes)
    assert p.sriov_device_plugin["resourceList"][0]["resourceName"] == "ethernet_numa_unknown"


def test_a_gpu_on_a_numa_node_without_cpus_takes_cores_of_another_node_and_keeps_its_hugepages(tmp_path: Path):
    """The documented fallback for a memory-only node: its GPU takes cores of the node with most to spare (topology
    manager `restricted`), its hugepages stay on its own node, and its gres.conf line names the cores of the node it
    takes them from (it used to say an empty `Cores=`)."""
    import shutil

    root = tmp_path / "hgx-h200"
    shutil.copytree(HOSTS / "hgx-h200", root)
    shutil.copytree(root / "sys/devices/system/node/node1", root / "sys/devices/system/node/node2")
    (root / "sys/devices/system/node/node2/cpulist").write_text("\n")
    (root / "sys/bus/pci/devices/0000:19:00.0/numa_node").write_text("2\n")  # GPU 0, on node 0 before
    p = plan(read_host(str(root), CATALOG_MAP), TuningProfile(hugepages_1g_per_gpu=2), "h200")
    gpu = p.gpus[0]
    assert (gpu.pci, gpu.numa_node) == ("0000:19:00.0", 2)
    assert set(gpu.cpus) <= set(range(48)) | set(range(96, 144))  # node 0's CPUs
    assert {"numa_node": 2, "size_kib": 1048576, "count": 2} in p.hugepages
    assert p.gres_conf[0] == "Name=gpu Type=h200-sxm-141gb File=/dev/nvidia0 Cores=0-47"
    assert p.kubelet["topologyManagerPolicy"] == "restricted"
    assert "NUMA node 2 has no CPUs; its GPUs take cores of node 0" in p.notes


def test_a_lab_vm_plans_the_same_before_and_after_its_tuning():
    """Recorded from one lab VM before its first converge and after it rebooted into its plan (1 GiB and 2 MiB pages
    allocated, VFs created, kernel arguments in place): the plan must not move, or every converge would change it."""
    fresh_facts = read_host(str(HOSTS / "lab-vm"), CATALOG_MAP)
    tuned_facts = read_host(str(HOSTS / "lab-vm-tuned"), CATALOG_MAP)
    assert [n["hugepages"] for n in tuned_facts["numa_nodes"]] == [{"1048576": 1, "2048": 64}] * 2
    assert [d["sriov_numvfs"] for d in tuned_facts["sriov_devices"]] == [4]  # the VFs are not devices of their own
    fresh, tuned = plan(fresh_facts, LAB_PROFILE, "lab-1"), plan(tuned_facts, LAB_PROFILE, "lab-1")
    assert tuned == fresh
    # the lab VM's CPU says AuthenticAMD (TCG) but its IOMMU is QEMU's Intel one (ACPI DMAR): VT-d needs intel_iommu=on
    assert (fresh_facts["cpu_vendor"], fresh_facts["iommu"]) == ("AuthenticAMD", "intel")
    assert fresh.kernel_args == [
        "default_hugepagesz=1G", "hugepagesz=1G", "hugepages=0:1,1:1", "intel_iommu=on", "iommu=pt"
    ]  # fmt: skip
    assert set(fresh.kernel_args) <= set(tuned_facts["cmdline"].split())
    assert [(d["pci"], d["numvfs"], d["numa_node"]) for d in fresh.sriov] == [("0000:81:00.0", 4, 1)]
    assert fresh.kubelet["reservedSystemCPUs"] == "0,2"  # one core per node


def test_virtio_nics_report_their_interface():
    (nic,) = read_host(str(HOSTS / "lab-vm"))["nics"]
    assert nic["interfaces"] == ["enp0s16"] and nic["vendor"] == "1af4"


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_default_profile_plans_every_recorded_machine(name: str):
    facts = read_host(str(HOSTS / name), CATALOG_MAP)
    assert_invariants(facts, plan(facts, TuningProfile(), name), TuningProfile())


def test_dgx_a100_nps4_default_profile_reserves_on_the_nodes_without_gpus():
    """NPS4: eight 16-core nodes, two GPUs on each of nodes 1, 3, 5, 7. The fixed 8 cores per GPU plus a reserved
    core per node used to be refused; now the system's 8 cores come from the GPU-less nodes."""
    facts = read_host(str(HOSTS / "dgx-a100"), CATALOG_MAP)
    p = plan(facts, TuningProfile(), "dgx")
    assert [(n.id, len(n.reserved_cpus) // 2, n.cores_per_gpu) for n in p.numa_nodes] == [
        (0, 2, 0), (1, 0, 8), (2, 2, 0), (3, 0, 8), (4, 2, 0), (5, 0, 8), (6, 2, 0), (7, 0, 8),
    ]  # fmt: skip
    assert (
        p.numa_nodes[1].choice
        == "16 cores, 0 for the system, 2 GPU(s): 8 cores each (the node's share, within cores_per_gpu 4-16)"
    )
    assert p.numa_nodes[0].choice == "16 cores, 2 for the system, no GPU"


def test_a_share_above_the_maximum_is_capped_and_the_rest_left_for_other_work():
    facts = read_host(str(HOSTS / "dgx-h100"), CATALOG_MAP)  # 56 cores and 4 GPUs per node
    p = plan(facts, TuningProfile(cores_per_gpu={"min": 4, "max": 10}), "dgx")
    assert [n.cores_per_gpu for n in p.numa_nodes] == [10, 10]
    assert p.numa_nodes[0].choice == (
        "56 cores, 1 for the system, 4 GPU(s): 10 cores each (cores_per_gpu 4-10 caps the node's share of 13),"
        " 15 left for other work"
    )


def test_too_few_cores_for_the_minimum_or_the_reservation_is_refused_with_the_numbers():
    facts = read_host(str(HOSTS / "dgx-a100"), CATALOG_MAP)
    with pytest.raises(TopologyError, match=r"host dgx: NUMA node 1 has 16 physical cores for 2 GPU\(s\); cores_per_gpu"
                       r" min 9 needs 18 \(lower cores_per_gpu, e.g. --cores-per-gpu 8\)"):  # fmt: skip
        plan(facts, TuningProfile(cores_per_gpu=9), "dgx")
    with pytest.raises(TopologyError, match=r"65 cores reserved for the system do not fit: after 64, the GPUs need"):
        plan(facts, TuningProfile(cores_per_gpu=8, reserved_cores=65), "dgx")


def test_a_gpu_the_catalog_does_not_know_is_refused_with_its_pci_id():
    facts = read_host(str(HOSTS / "dgx-h100"), {})
    with pytest.raises(
        TopologyError, match=r"GPU 0000:1b:00.0 has PCI id 10de:2330, which gpufleet's catalog does not"
    ):
        plan(facts, TuningProfile(), "h")


def test_refusals_name_host_and_reason():
    facts = read_host(str(HOSTS / "no-gpu"), CATALOG_MAP)
    with pytest.raises(TopologyError, match=r"ens1f0 \(0000:31:00.0\) supports 128 VFs; the profile asks for 200"):
        plan(facts, TuningProfile(vfs_per_nic=200), "cpu1")
    with pytest.raises(TopologyError, match="host cpu1: NUMA node 0: 300 x 1 GiB"):
        plan(facts, TuningProfile(hugepages_1g_per_node=300), "cpu1")
    two_nodes_unknown = read_host(str(HOSTS / "dgx-h100"), CATALOG_MAP)
    two_nodes_unknown["gpus"][0]["numa_node"] = None
    with pytest.raises(TopologyError, match=r"reports no NUMA node \(numa_node = -1\) on a host with 2 NUMA nodes"):
        plan(two_nodes_unknown, TuningProfile(), "h")


# -- generated topologies --------------------------------------------------------------------------------------


@st.composite
def topologies(draw: st.DrawFn) -> dict:
    nodes = draw(st.integers(1, 8))
    cores = draw(st.sampled_from([1, 2, 4, 8, 16, 24, 32, 48, 64]))
    # firmware without PCI locality is a property of a whole host (and rare)
    no_locality = draw(st.integers(0, 7)) == 0
    threads = draw(st.integers(1, 2))
    cpu = 0
    numa_nodes, core_list = [], []
    cpus_of_node: dict[int, list[int]] = {n: [] for n in range(nodes)}
    for n in range(nodes):
        for c in range(cores):
            cpus = [cpu + t * nodes * cores for t in range(threads)]
            cpu += 1
            core_list.append({"package": n // 2, "core": c, "cpus": cpus, "numa_node": n})
            cpus_of_node[n] += cpus
    for n in range(nodes):
        numa_nodes.append(
            {
                "id": n,
                "cpus": sorted(cpus_of_node[n]),
                "memory_kib": draw(st.sampled_from([1, 4, 16, 64, 256, 512])) * 1048576,
                "hugepages": {},
            }
        )
    gpus, nics, sriov = [], [], []
    bus = 1
    for n in range(nodes):
        for _ in range(draw(st.integers(0, 4))):
            node = None if no_locality else n
            gpu = {"pci": f"0000:{bus:02x}:00.0", "vendor": "10de", "device": "2330", "class": "0302"}
            gpus.append(gpu | {"numa_node": node, "local_cpus": [], "model": "H100-SXM5-80GB", "mig_capable": True})
            bus += 1
        for _ in range(draw(st.integers(0, 2))):
            total = draw(st.sampled_from([0, 4, 16, 64]))
            nic = {"pci": f"0000:{bus:02x}:00.0", "vendor": "15b3", "device": "1021",
                   "class": draw(st.sampled_from(["0200", "0207"])), "numa_node": n, "interfaces": [f"nic{bus}"],
                   "sriov_totalvfs": total, "sriov_numvfs": 0}  # fmt: skip
            nic["kind"] = "ethernet" if nic["class"] == "0200" else "infiniband"
            bus += 1
            nics.append(nic)
            if total:
                sriov.append({k: nic[k] for k in ("pci", "vendor", "device", "class", "numa_node", "interfaces",
                                                   "sriov_totalvfs", "sriov_numvfs")})  # fmt: skip
    return {
        "host_root": "/",
        "cpu_vendor": draw(st.sampled_from(["GenuineIntel", "AuthenticAMD"])),
        "kernel": draw(st.sampled_from(["4.18.0-553.el8", "5.15.0-91-generic", "5.16.0", "6.8.0-45-generic"])),
        "cmdline": "ro",
        "memory_kib": sum(n["memory_kib"] for n in numa_nodes),
        "numa_nodes": numa_nodes,
        "cores": core_list,
        "smt": threads > 1,
        "gpus": gpus,
        "nics": nics,
        "nvswitches": [],
        "sriov_devices": sriov,
    }


# typical values most of the time, extremes sometimes: both the plans and the refusals get exercised
PROFILES_ST = st.builds(
    TuningProfile,
    cores_per_gpu=st.one_of(
        st.sampled_from([1, 2, 4, 6, 8]),
        st.builds(CoresPerGpu),
        st.builds(dict, min=st.integers(1, 8), max=st.just(12)),
    ),
    reserved_cores=st.one_of(st.none(), st.integers(0, 8)),
    hugepages_1g_per_gpu=st.sampled_from([0, 0, 0, 1, 2, 4, 16]),
    hugepages_2m_per_node=st.sampled_from([0, 0, 0, 256, 1024, 4096]),
    vfs_per_nic=st.sampled_from([0, 0, 4, 8, 16, 32]),
    isolation=st.booleans(),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(facts=topologies(), profile=PROFILES_ST)
def test_generated_topologies_hold_the_invariants_or_are_refused_clearly(facts, profile):
    try:
        p = plan(facts, profile, "gen-host")
    except TopologyError as exc:
        assert str(exc).startswith("host gen-host: ") and exc.reason
        event("refused: " + exc.reason.split(":")[0].split(" has ")[0][:24])
        return
    event(f"planned ({'with' if p.gpus else 'without'} GPUs)")
    assert_invariants(facts, p, profile)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(facts=topologies())
def test_the_default_profile_plans_every_machine_that_has_room_for_it(facts):
    """The default profile (4 to 16 cores per GPU, one system core per NUMA node) plans every generated machine
    where each GPU's node has 4 cores per GPU and the host a core to spare per node, whatever the NPS mode or the
    number of GPUs per node; it refuses exactly the others, with the reason."""
    cores = {n["id"]: 0 for n in facts["numa_nodes"]}
    for core in facts["cores"]:
        cores[core["numa_node"]] += 1
    gpus_on = dict.fromkeys(cores, 0)
    for g in facts["gpus"]:
        gpus_on[g["numa_node"] if g["numa_node"] is not None else 0] += 1
    located = len(cores) == 1 or all(g["numa_node"] is not None for g in facts["gpus"])
    room = all(cores[n] >= 4 * gpus_on[n] for n in cores) and sum(cores[n] - 4 * gpus_on[n] for n in cores) >= len(
        cores
    )
    try:
        p = plan(facts, TuningProfile(), "gen-host")
    except TopologyError as exc:
        assert not (located and room), exc.reason
        assert re.search(r"NUMA node|reserved for the system", exc.reason), exc.reason
        event("refused")
        return
    assert located and room
    event(f"planned ({'with' if p.gpus else 'without'} GPUs)")
    assert_invariants(facts, p, TuningProfile())


@st.composite
def feasible_cases(draw: st.DrawFn) -> tuple[dict, TuningProfile]:
    """A topology and a profile chosen to fit it: the planner must plan it (a refusal is a bug)."""
    facts = draw(
        topologies().filter(lambda f: not any(g["numa_node"] is None for g in f["gpus"]) or len(f["numa_nodes"]) == 1)
    )
    cores = {n["id"]: 0 for n in facts["numa_nodes"]}
    for core in facts["cores"]:
        cores[core["numa_node"]] += 1
    gpus_on = {n: 0 for n in cores}
    for g in facts["gpus"]:
        gpus_on[g["numa_node"] if g["numa_node"] is not None else 0] += 1
    assume(all(cores[n] >= gpus_on[n] for n in cores))  # at least a core per GPU, or no profile fits
    room = min((cores[n] // gpus_on[n] for n in cores if gpus_on[n]), default=8)
    minimum = draw(st.integers(1, min(room, 16)))
    spare = sum(cores[n] - minimum * gpus_on[n] for n in cores)
    reserved = draw(st.one_of(st.integers(0, spare), *([st.none()] if spare >= len(cores) else [])))
    cores_per_gpu = CoresPerGpu(min=minimum, max=draw(st.integers(minimum, minimum + 16)))
    smallest_mib = min(n["memory_kib"] // 1024 for n in facts["numa_nodes"])
    keep = max(512, int(0.1 * smallest_mib))
    most_gpus = max(gpus_on.values())
    budget_mib = (smallest_mib - keep) // 2  # half of what may go to hugepages, the rest stays ordinary memory
    per_gpu = draw(st.integers(0, budget_mib // 1024 // most_gpus)) if most_gpus and budget_mib >= 1024 else 0
    pages_2m = draw(st.integers(0, max(0, (budget_mib - per_gpu * most_gpus * 1024) // 2)))
    limits = [d["sriov_totalvfs"] for d in facts["sriov_devices"]]
    vfs = draw(st.integers(0, min(limits))) if limits else 0
    profile = TuningProfile(
        cores_per_gpu=cores_per_gpu,
        reserved_cores=reserved,
        hugepages_1g_per_gpu=per_gpu,
        hugepages_2m_per_node=pages_2m,
        vfs_per_nic=vfs,
        isolation=draw(st.booleans()),
    )
    return facts, profile


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.filter_too_much])  # fmt: skip
@given(case=feasible_cases())
def test_feasible_profiles_are_always_planned_and_hold_the_invariants(case):
    facts, profile = case
    p = plan(facts, profile, "fit-host")
    assert_invariants(facts, p, profile)


# -- facts -----------------------------------------------------------------------------------------------------


def test_facts_of_the_dgx_h100():
    f = read_host(str(HOSTS / "dgx-h100"), CATALOG_MAP)
    assert (f["cpu_vendor"], f["kernel"], f["smt"]) == ("GenuineIntel", "5.15.0-1042-nvidia", True)
    assert [len(n["cpus"]) for n in f["numa_nodes"]] == [112, 112]
    assert len(f["cores"]) == 112 and f["cores"][0]["cpus"] == [0, 112]
    assert [g["model"] for g in f["gpus"]] == ["H100-SXM5-80GB"] * 8
    assert sum(n["kind"] == "infiniband" for n in f["nics"]) == 8 and len(f["nvswitches"]) == 4
    assert f["numa_nodes"][0]["memory_kib"] == 1024 * 1048576
    assert f["numa_nodes"][0]["hugepages"] == {"1048576": 0, "2048": 0}


def test_unknown_gpus_are_reported_without_a_model():
    f = read_host(str(HOSTS / "dgx-h100"), {})
    assert {g["model"] for g in f["gpus"]} == {None}


@given(st.lists(st.integers(0, 300), max_size=40))
def test_cpulist_round_trips(cpus):
    from gpufleet.host.hostfacts import format_cpulist

    assert parse_cpulist(format_cpulist(cpus)) == sorted(set(cpus))


def test_recorded_trees_match_their_descriptions(tmp_path: Path):
    """generate.py regenerates every machine; the committed trees must be exactly that."""
    import subprocess
    import sys

    subprocess.run([sys.executable, str(HOSTS / "generate.py"), str(tmp_path)], check=True, stdin=subprocess.DEVNULL)
    for machine in sorted(p for p in tmp_path.iterdir() if p.is_dir()):
        fresh = {p.relative_to(machine): p.read_bytes() for p in machine.rglob("*") if p.is_file()}
        committed = {
            p.relative_to(HOSTS / machine.name): p.read_bytes()
            for p in (HOSTS / machine.name).rglob("*")
            if p.is_file()
        }
        assert fresh == committed, machine.name


def test_kubelet_plan_does_not_move_with_boot_to_boot_memtotal_noise():
    """Two boots of the same lab VM left different MemTotal per node (recorded: 4016120 vs 4061380 kB on node 0,
    2060868 vs 2015616 kB on node 1); the kubelet drop-in must come out the same, or it changes after every
    reboot and a converge is never idempotent."""
    profile = TuningProfile(reserved_cores=2, hugepages_1g_per_node=1, hugepages_2m_per_node=64)

    def lab_host(node0_kib: int, node1_kib: int) -> dict:
        cores = [{"package": n, "core": c, "cpus": [2 * n + c], "numa_node": n} for n in (0, 1) for c in (0, 1)]
        nodes = [
            {"id": 0, "cpus": [0, 1], "memory_kib": node0_kib, "hugepages": {}},
            {"id": 1, "cpus": [2, 3], "memory_kib": node1_kib, "hugepages": {}},
        ]
        host = {"cpu_vendor": "AuthenticAMD", "kernel": "6.1.0-50-amd64", "memory_kib": node0_kib + node1_kib}
        return host | {"numa_nodes": nodes, "cores": cores, "smt": False, "gpus": [], "nics": [], "sriov_devices": []}

    first = plan(lab_host(4016120, 2060868), profile, "lab-1").kubelet
    second = plan(lab_host(4061380, 2015616), profile, "lab-1").kubelet
    assert first == second
