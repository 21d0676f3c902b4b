"""ansible/site.yml on two real lab VMs, step by step, as the lab issue's acceptance lists it.

The steps share two hosts and run in order (each needs the state the one before left): check mode on fresh hosts
changes nothing; the first converge reboots into the new kernel arguments; state equals plan; a converge whose SSH
connection to one host drops, and one with a host rebooting mid-play, stop that host alone; a second converge
after a Redfish power cycle of one host changes nothing; a host powered off mid-run does not stop the other.
"""

from __future__ import annotations

import functools
import http.server
import json
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from pulumi.dynamic import Config, ConfigureRequest

from gpufleet.baremetal.bmc import BmcError, ExpectedHardware
from gpufleet.lab import image, redfish, ssh, virt
from gpufleet.lab.ansible_run import PlaybookResult, run_playbook
from gpufleet.lab.config import SHAPE
from gpufleet.lab.job import load_record
from gpufleet.lab.report import host_report
from gpufleet.spec.load import load_stack
from infra.baremetal.provider import BareMetalHostProvider, HostInputs, SshSpec, Timeouts
from tests.conftest import REPO
from tests.lab.conftest import Lanes

STACK = "lab-local"
# Everything the roles manage on a host: file hashes and the kernel's live values.
SNAPSHOT = r"""
for f in /etc/default/grub.d/* /boot/grub/grub.cfg /usr/local/sbin/gpufleet-* /etc/systemd/system/gpufleet-* \
         /etc/systemd/system/multi-user.target.wants/gpufleet-* /etc/kubernetes/kubelet.conf.d/* \
         /etc/systemd/system.conf.d/* /etc/default/irqbalance /etc/pcidp/config.json /etc/fstab \
         /etc/gpufleet/* /etc/udev/rules.d/60-gpufleet-* /etc/modprobe.d/gpufleet-* /etc/modules-load.d/gpufleet-*; do
  [ -e "$f" ] && sha256sum "$f"
done
for f in /sys/devices/system/node/node*/hugepages/hugepages-*/nr_hugepages /sys/bus/pci/devices/*/sriov_numvfs; do
  echo "$f $(cat $f)"
done
for d in /sys/bus/pci/devices/*; do echo "$d $(readlink $d/driver) $(cat $d/driver_override)"; done
echo "thp $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
grep hugetlbfs /proc/mounts || true
grep Cpus_allowed_list /proc/1/status
"""

ADVERTISER_SOCKETS = (
    "/var/lib/kubelet/device-plugins/nvidia-gpu.sock",
    "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock",
)
PLANT_SOCKETS = (
    "import os, socket, sys\n"
    "for path in sys.argv[1:]:\n"
    "    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
    "    socket.socket(socket.AF_UNIX).bind(path)\n"
)


def converge(lab_hosts: dict, check: bool = False, progress=print) -> PlaybookResult:
    return run_playbook(
        REPO / "ansible/site.yml", lab_hosts["inventory"], {"gpufleet_stack": STACK}, check=check, progress=progress
    )


def verify(lab_hosts: dict, strategy: str | None = None, limit: str | None = None) -> PlaybookResult:
    return run_playbook(
        REPO / "ansible/playbooks/verify.yml",
        lab_hosts["inventory"],
        {"gpufleet_stack": STACK},
        strategy=strategy,
        limit=limit,
    )


def changed_per_host(output: str, task: str) -> dict[str, int]:
    """How many times each host reported ``changed`` for tasks whose name contains ``task``."""
    counts: dict[str, int] = {}
    for block in output.split("\nTASK [")[1:]:
        header, _, body = block.partition("\n")
        if task in header:
            for line in body.splitlines():
                if line.startswith("changed: ["):
                    name = line[len("changed: [") :].split("]")[0]
                    counts[name] = counts.get(name, 0) + 1
    return counts


def assert_vf_on_vfio(host) -> None:
    """The lab VM's VF (the lab stack's VM device) is bound to vfio-pci, and the kernel lists IOMMU groups."""
    driver, groups = remote(
        host, "readlink /sys/bus/pci/devices/0000:81:00.1/driver; ls /sys/kernel/iommu_groups | wc -l"
    ).split()
    assert driver.endswith("/vfio-pci"), f"{host.name}: 0000:81:00.1 is bound to {driver}"
    assert int(groups) > 0, f"{host.name}: /sys/kernel/iommu_groups is empty"


def run_tool(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def remote(host, command: str) -> str:
    proc = ssh.run(image.ssh_key(), host.ssh_port, command, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def stack():
    return load_stack(REPO / f"Pulumi.{STACK}.yaml").stack


# The NVIDIA driver's kernel log line for an Xid, written to the kernel log (/dev/kmsg) as the driver logs it: the lab
# VMs have no GPU, so this line is the planted event (docs/remediation.md). The address is a GPU's, not a lab device's.
XID_LINE = "NVRM: Xid (PCI:0000:41:00): {code}, pid='<unknown>', name=<unknown>, {words}"
XID_WORDS = {79: "GPU has fallen off the bus.", 48: "An uncorrectable double bit error (DBE) has been detected."}
REMEDIATION_STATE = "/var/lib/gpufleet/remediation.json"


def plant_xid(host, code: int) -> None:
    line = XID_LINE.format(code=code, words=XID_WORDS[code])
    remote(host, f"echo {shlex.quote('<3>' + line)} > /dev/kmsg")


def boot_id(host) -> str:
    return remote(host, "cat /proc/sys/kernel/random/boot_id").strip()


NODE0_PAGES = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"
# Every SSH session on the host ends at once (its sshd's session processes killed; the listener stays): the running
# play's connection drops as when sshd restarts or a connection is reset. This command's own session goes too.
DROP_SSH = "pkill -KILL -P $(cat /run/sshd.pid)"
# The gpufleet_summary callback's last line when a host was lost (ansible/plugins/callback/gpufleet_summary.py).
RERUN = "Re-run the play once the host answers: each role changes only what is still undone."


def converge_with_fault(lab_hosts: dict, at: str, host, command: str) -> PlaybookResult:
    """site.yml on both hosts, ``command`` run on ``host`` the moment the play's output reaches a line starting with
    ``at``: through an SSH session opened before the play, waiting for a line on its stdin, so the fault lands
    within milliseconds instead of after a new connection's handshake (seconds under emulation)."""
    armed = subprocess.Popen(
        ssh.command(image.ssh_key(), host.ssh_port, f"echo armed; read go; {command}"),
        stdin=subprocess.PIPE,  # the line that fires it
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert armed.stdout is not None and armed.stdin is not None
    try:
        assert armed.stdout.readline() == "armed\n", f"no SSH session to {host.name}"
        reached = threading.Event()
        holder: dict[str, PlaybookResult] = {}

        def progress(line: str) -> None:
            if line.startswith(at) and not reached.is_set():
                reached.set()
                armed.stdin.write("go\n")
                armed.stdin.flush()

        thread = threading.Thread(target=lambda: holder.setdefault("r", converge(lab_hosts, progress=progress)))
        thread.start()
        thread.join(1800)
        assert reached.is_set(), f"the play never reached {at!r}"
    finally:
        armed.kill()  # its session ends with the fault, or here when the play never reached it
        armed.wait()
    return holder["r"]


def remediate(lab_hosts: dict, **extra: str) -> PlaybookResult:
    return run_playbook(REPO / "ansible/remediate.yml", lab_hosts["inventory"], {"gpufleet_stack": STACK, **extra})


# The lab's BMC through the Pulumi program's BareMetalHost provider, its CRUD called directly (no Pulumi CLI here):
# the engine hands create/update the secret password unwrapped, and delete/read find it in the stack config by key.
PASSWORD_KEY = "gpufleet:bmc_password"


def provider(creds: redfish.Credentials, lines: list[str]) -> BareMetalHostProvider:
    p = BareMetalHostProvider(progress=lines.append)
    p.configure(ConfigureRequest(Config({PASSWORD_KEY: creds.password}, "gpufleet")))
    return p


def host_inputs(host, creds: redfish.Credentials, **changes) -> HostInputs:
    """A lab host as a stack would describe it: claimed by its system id (sushy-emulator reports no serial), SSH
    with the lab's key so the provider reads its facts; a graceful power-off gets 1 s before ForceOff."""
    inputs = HostInputs(
        name=host.name,
        host_group="lab",
        bmc_address=creds.url,
        bmc_username=creds.user,
        bmc_password_key=PASSWORD_KEY,
        system_id=host.uuid,
        ssh=SshSpec("127.0.0.1", host.ssh_port, "root", str(image.ssh_key())),
        expected=ExpectedHardware(numa_nodes=len(SHAPE.node_mib)),
        timeouts=Timeouts(power_s=120, graceful_off_s=1, ssh_s=420, facts_s=120),
    )
    return replace(inputs, **changes)


def props(inputs: HostInputs, password: str) -> dict:
    return inputs.to_props() | {"password": password}


def media(client: redfish.Client, system_id: str) -> list[tuple[str, str]]:
    """The virtual media the BMC reports an image in, as Redfish shows them."""
    return [(m.id, m.image) for m in client.bmc.inventory(system_id, devices=False).virtual_media if m.image]


@contextmanager
def served(data: bytes) -> Iterator[str]:
    """A URL serving ``data`` on 127.0.0.1 (an image for virtual media), stopped afterwards."""
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "boot.iso").write_bytes(data)
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=d)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/boot.iso"
        finally:
            server.shutdown()
            server.server_close()


def profile():
    lab = stack()
    return lab.tuning_profile(lab.baremetal.host_groups[0].tuning_profile)


@pytest.mark.usefixtures("lab_hosts")
class TestLab:
    state: dict = {}

    def test_the_hosts_are_powered_through_redfish_and_have_two_numa_nodes(self, lab_hosts):
        result = lab_hosts["result"]
        assert result.backend == "libvirt" and result.redfish == redfish.credentials().url
        client = redfish.Client(redfish.credentials())
        for host in result.hosts:
            assert client.power_state(host.uuid) == "On"
            assert "available: 2 nodes (0-1)" in remote(host, "numactl -H")
        assert any("power On through Redfish" in line for line in lab_hosts["log"])

    def test_the_hosts_start_from_the_booted_snapshot_each_with_its_own_identity_and_sriov_device(self, lab_hosts):
        """Restored from one saved boot (snapshot.py), each host is still itself: its name, its SSH host key, the
        time, a readable journal, and the hot-plugged SR-IOV NVMe controller on NUMA node 1 as a cold boot has it."""
        result = lab_hosts["result"]
        assert sorted(result.restored) == sorted(h.name for h in result.hosts)
        assert all(seconds < 60 for seconds in result.boot_seconds.values()), result.boot_seconds  # no boot
        keys = set()
        for host in result.hosts:
            out = remote(host, "hostname; ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub; date +%s; "
                               "d=$(ls -d /sys/bus/pci/drivers/nvme/0000:* | head -1); "
                               "cat $d/sriov_totalvfs $d/numa_node; journalctl -b -n 1 -q -o cat | wc -l")  # fmt: skip
            name, key, clock, total_vfs, node, journal_lines = out.splitlines()[:6]
            assert name == host.name
            keys.add(key)
            assert abs(int(clock) - time.time()) < 60
            assert (total_vfs, node) == (str(SHAPE.sriov_vfs), str(SHAPE.sriov_node))
            assert journal_lines == "1"  # journalctl finds this boot's journal
            # the restore put the clock hours ahead, and no daily job (apt's, fstrim's...) started for it (image.py)
            jobs = " ".join(f"-u {timer.removesuffix('.timer')}.service" for timer in image.DAILY_TIMERS)
            ran = remote(host, f"journalctl -b -q -o cat {jobs}")
            assert ran.strip() == "", ran
        assert len(keys) == len(result.hosts)

    def test_check_mode_on_fresh_hosts_reports_changes_and_changes_nothing(self, lab_hosts, tmp_path):
        """Through the inventory `gpufleet inventory lab-local` writes (from the file `lab up` wrote), which
        ansible-inventory accepts. The run is limited to the first host: both are copies of the booted snapshot, and
        the other's guest CPU goes to the scenarios beside (under emulation the lab is CPU-bound); the other host
        is checked unchanged too."""
        hosts = lab_hosts["result"].hosts
        root = tmp_path / "root"
        (root / "inventories/lab-local").mkdir(parents=True)
        (root / f"Pulumi.{STACK}.yaml").write_text((REPO / f"Pulumi.{STACK}.yaml").read_text())
        (root / "inventories/lab-local/hosts.yml").write_text(lab_hosts["inventory"].read_text())
        written = tmp_path / "hosts.yml"
        cli = run_tool([sys.executable, "-m", "gpufleet", "inventory", STACK, "--root", str(root), "-o", str(written)])
        listed = run_tool([str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(written), "--list"])
        assert cli.returncode == 0 and listed.returncode == 0, cli.stderr + listed.stderr
        assert set(json.loads(listed.stdout)["_meta"]["hostvars"]) == {h.name for h in hosts}
        before = {h.name: remote(h, SNAPSHOT) for h in hosts}
        result = run_playbook(
            REPO / "ansible/site.yml", written, {"gpufleet_stack": STACK}, check=True, limit=hosts[0].name
        )
        assert result.rc == 0, result.output[-3000:]
        after = {h.name: remote(h, SNAPSHOT) for h in hosts}
        assert set(result.recap) == {hosts[0].name} and result.recap[hosts[0].name]["changed"] > 0  # what it would do
        assert after == before  # and does nothing

    def test_first_converge_reboots_into_the_plan(self, lab_hosts):
        hosts = lab_hosts["result"].hosts
        boot_ids = {h.name: remote(h, "cat /proc/sys/kernel/random/boot_id") for h in hosts}
        qemu_pids = {h.name: virt.domain_pid(h) for h in hosts}
        started = time.monotonic()
        result = converge(lab_hosts)
        self.state["first_converge_seconds"] = time.monotonic() - started
        assert result.rc == 0, result.output[-3000:]
        for h in hosts:
            assert result.recap[h.name]["failed"] == 0 and result.recap[h.name]["unreachable"] == 0
            assert remote(h, "cat /proc/sys/kernel/random/boot_id") != boot_ids[h.name], f"{h.name} did not reboot"
            # the guest's reboot went through the lab's reset line: a new QEMU process (gpufleet/lab/resetd.py)
            qemu_pid = virt.domain_pid(h)
            assert qemu_pid is not None, f"{h.name}: no running QEMU process"
            assert qemu_pid != qemu_pids[h.name], f"{h.name} rebooted in its old QEMU process"
        # hugepages and IOMMU add kernel arguments (isolation has none in this stack): grub.cfg is regenerated once
        assert changed_per_host(result.output, "Regenerate the GRUB configuration") == {h.name: 1 for h in hosts}

    def test_the_hosts_real_state_equals_the_plan(self, lab_hosts):
        tuning, branch = profile(), stack().release.driver_branch
        for h in lab_hosts["result"].hosts:
            report = host_report(h.name, h.ssh_port, image.ssh_key(), tuning, branch)
            assert report.ok, report.render()
            cmdline = report.cmdline.split()
            assert {"default_hugepagesz=1G", "hugepagesz=1G", "hugepages=0:1,1:1"} <= set(cmdline)
            assert cmdline[0].startswith("BOOT_IMAGE=")  # booted through GRUB from its disk
            # 1 GiB pages exist on node 1; 64 x 2 MiB on each node
            assert (
                remote(h, "cat /sys/devices/system/node/node1/hugepages/hugepages-1048576kB/nr_hugepages").strip()
                == "1"
            )
            pages = remote(h, "cat /sys/devices/system/node/node*/hugepages/hugepages-2048kB/nr_hugepages").split()
            assert pages == ["64", "64"]
            # the SR-IOV device's VFs exist and sit on NUMA node 1
            vfs = remote(
                h, "d=/sys/bus/pci/devices/0000:81:00.0; cat $d/sriov_numvfs; cat $d/virtfn*/numa_node"
            ).split()
            assert vfs == ["4", "1", "1", "1", "1"]
            # the lab stack's one VM gets the first VF: bound to vfio-pci, the IOMMU (QEMU's Intel one) on
            assert {"intel_iommu=on", "iommu=pt"} <= set(cmdline)
            assert_vf_on_vfio(h)

    def test_the_lab_hosts_vm_domain_defines_in_libvirt(self, lab_hosts, tmp_path):
        """The libvirt domain `gpufleet virt plan` writes for the lab stack's VM, from the recorded tuned lab host,
        is accepted by this machine's libvirtd (defined, then undefined: never started)."""
        xml_dir = tmp_path / "xml"
        argv = [sys.executable, "-m", "gpufleet", "virt", "plan", STACK, "--xml-dir", str(xml_dir), "--host-root"]
        proc = run_tool([*argv, str(REPO / "tests/fixtures/hosts/lab-vm-tuned"), "--host", "gpufleet-virt-test"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (domain,) = sorted(xml_dir.glob("*.xml"))
        name = domain.stem
        assert virt.virsh("domstate", name, check=False).returncode != 0, f"a domain {name} exists already"
        try:
            virt.virsh("define", str(domain))
            dumped = virt.virsh("dumpxml", name).stdout
        finally:
            virt.virsh("undefine", name, check=False)
        assert "<hostdev mode='subsystem' type='pci' managed='yes'>" in dumped
        assert "<address domain='0x0000' bus='0x81' slot='0x00' function='0x1'/>" in dumped
        assert "<vcpupin vcpu='0' cpuset='3'/>" in dumped and "<page size='2048' unit='KiB'/>" in dumped
        assert virt.virsh("domstate", name, check=False).returncode != 0  # undefined again

    def test_remediate_power_cycles_only_the_host_with_an_xid_79_and_never_the_last_healthy_one(self, lab_hosts):
        """ansible/remediate.yml on the lab's host group (max_hosts_at_once 2). An Xid 79 planted on one host: that
        host alone is taken out of service, power-cycled through its Redfish BMC and back in service. Then an Xid 48
        (cordon, for a person) on the first host and an Xid 79 on the second: the first is cordoned, and the second,
        the group's last healthy host, is refused and left as it was. A person's return brings both back."""
        one, other = lab_hosts["result"].hosts
        boots = {h.name: boot_id(h) for h in (one, other)}
        plant_xid(other, 79)
        cycled = remediate(lab_hosts)
        assert cycled.rc == 0, cycled.output[-3000:]
        assert "calls for power-cycle" in cycled.output and f"{one.name}  leave   no Xid logged" in cycled.output
        assert "reset ForceOff" in cycled.output  # through the BMC (the action's steps)
        assert boot_id(other) != boots[other.name] and boot_id(one) == boots[one.name]  # that host only
        state = json.loads(remote(other, f"cat {REMEDIATION_STATE}"))
        assert state["out_of_service"] is None
        assert state["history"][-1]["result"] == "power-cycle done, no new Xid: back in service"
        boots[other.name] = boot_id(other)

        plant_xid(one, 48)
        plant_xid(other, 79)
        refused = remediate(lab_hosts)
        assert refused.rc == 2, refused.output[-3000:]
        cordoned = f"{one.name}  act     Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE) on 0000:41:00 calls for cordon"
        assert cordoned in refused.output
        assert "calls for power-cycle, but it is the last healthy host of host group lab" in refused.output
        assert boot_id(other) == boots[other.name] and boot_id(one) == boots[one.name]  # nobody rebooted
        assert "a person repairs it" in json.loads(remote(one, f"cat {REMEDIATION_STATE}"))["out_of_service"]
        assert json.loads(remote(other, f"cat {REMEDIATION_STATE}"))["out_of_service"] is None  # refused: unchanged

        back = remediate(lab_hosts, gpufleet_remediation_return=f"{one.name},{other.name}")
        assert back.rc == 0, back.output[-3000:]
        for h in (one, other):
            assert json.loads(remote(h, f"cat {REMEDIATION_STATE}"))["out_of_service"] is None
        self.state["remediated"] = other.name  # the verify step reports its power cycle

    def test_verify_playbook_passes_then_fails_with_a_table_on_a_changed_hugepage_count(self, lab_hosts):
        # The first run with Ansible's own `linear` strategy, without Mitogen (ansible.cfg's default runs the rest),
        # on the host the remediation step power-cycled: without Mitogen each task starts Python on the host (2-3 s
        # of guest CPU under emulation, ~40 tasks); the second run and `make lab`'s verify check both hosts.
        remediated = self.state.get("remediated", lab_hosts["result"].hosts[1].name)
        result = verify(lab_hosts, strategy="linear", limit=remediated)
        assert result.rc == 0, result.output[-3000:]
        assert f"gpufleet verify ({STACK}): all 1 ok" in result.output
        if "remediated" in self.state:  # the health column's note: the host's last remediation (the step above)
            assert f"{self.state['remediated']}  health: last remediation" in result.output
            assert "calls for power-cycle; power-cycle done, no new Xid: back in service" in result.output
        host = lab_hosts["result"].hosts[0]
        pages = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"
        remote(host, f"echo 10 > {pages}")
        # and a second GPU advertiser: TEST DOUBLES of the device plugin's kubelet socket and the DRA kubelet plugin's
        # registration socket (unix sockets nothing listens on; verify reads what is registered, as the kubelet does)
        remote(host, f"python3 -c {shlex.quote(PLANT_SOCKETS)} {' '.join(ADVERTISER_SOCKETS)}")
        try:
            result = verify(lab_hosts)
            assert result.rc == 2, result.output[-3000:]
            assert f"{host.name}  hugepages: NUMA node 0 has 10 hugepages of 2048 kB; the plan is 64" in result.output
            # the same run's owners column: both advertisers named, against the lab group's plan (the default)
            assert (
                f"{host.name}  owners: advertiser: both the device plugin ({ADVERTISER_SOCKETS[0]}) and the DRA kubelet"
                f" plugin ({ADVERTISER_SOCKETS[1]}) are registered; the plan's advertiser is device-plugin"
            ) in result.output
            assert "1 of 2 host(s) failed verification" in result.output
        finally:
            remote(host, f"echo 64 > {pages}; rm -f {' '.join(ADVERTISER_SOCKETS)}")

    def test_an_ssh_connection_dropped_mid_converge_stops_that_host_alone(self, lab_hosts):
        """site.yml on both hosts with one host's 2 MiB pages changed on NUMA node 0; as the play reaches the
        host's topology, every SSH session on that host is killed (its sshd's session processes: what a restarted
        sshd or a reset connection does to a running play). That host stops there with one line saying so after
        the recap, its pages still as changed; the other goes through the whole play. The next step's converge
        picks up what was left."""
        victim, other = lab_hosts["result"].hosts
        remote(victim, f"echo 10 > {NODE0_PAGES}")
        result = converge_with_fault(lab_hosts, "TASK [Discover the host's topology]", victim, DROP_SSH)
        # Mitogen counts the lost call as the task failing, or as the host unreachable when it fell between calls
        recap = result.recap[victim.name]
        assert recap["failed"] + recap["unreachable"] == 1, result.output[-3000:]
        assert result.recap[other.name]["failed"] == 0 and result.recap[other.name]["unreachable"] == 0
        assert "Verify SR-IOV" in result.output  # the other went through the whole play, verification included
        head, line, rerun = result.stopped.splitlines()
        assert head == "gpufleet: 1 of 2 host(s) did not finish the play; the others were not held up:", head
        # Mitogen's own words close the line (by when the drop met the call: "the respondent Context has
        # disconnected", "no route to 5, my ID is 0")
        lost = (
            ' at task "Discover the host\'s topology": the connection to the host was lost during the task (the '
            "host rebooted, powered off, or its SSH connection or network dropped) ["
        )
        assert line.startswith(f"  {victim.name}  ") and lost in line, result.stopped
        assert rerun == RERUN
        assert remote(victim, f"cat {NODE0_PAGES}").strip() == "10"  # stopped before its roles

    def test_a_host_rebooting_mid_converge_stops_that_host_alone_and_the_rerun_converges(self, lab_hosts):
        """site.yml again, the other host rebooted (`systemctl reboot` on it) as the play reaches the hugepages
        role: that host stops with its line, and the host whose SSH connection dropped in the step before
        converges in the same run (its 2 MiB pages back to the plan). `make lab` two steps on finds the rebooted
        host back, nothing to change on either (changed=0), and verifies both."""
        dropped, victim = lab_hosts["result"].hosts
        booted = boot_id(victim)
        result = converge_with_fault(lab_hosts, "TASK [hugepages", victim, "systemctl reboot")
        recap = result.recap[victim.name]
        assert recap["failed"] + recap["unreachable"] == 1, result.output[-3000:]
        assert result.recap[dropped.name]["failed"] == 0 and result.recap[dropped.name]["unreachable"] == 0
        assert result.recap[dropped.name]["changed"] > 0  # what the dropped connection left undone, done now
        assert changed_per_host(result.output, "Allocate the runtime hugepages") == {dropped.name: 1}
        assert remote(dropped, f"cat {NODE0_PAGES}").strip() == "64"
        # by when the reboot met the play: the connection lost during a task, or the next task's connection refused
        # while the host was down (both seen in fresh clones' lab runs, 2026-11-29)
        line = next(line for line in result.stopped.splitlines() if line.startswith(f"  {victim.name}  "))
        assert " unreachable at task " in line or " failed at task " in line, result.stopped
        assert (
            "the connection to the host was lost during the task" in line
            or "no SSH connection to the host: ssh: connect to host 127.0.0.1 port" in line
        ), result.stopped
        assert result.stopped.endswith(RERUN)
        self.state["rebooted"] = (victim, booted)  # back by `make lab`'s step (it boots while the next step runs)

    def test_bare_metal_host_create_boots_a_powered_off_host_through_redfish_with_its_facts(self, lab_hosts, capfd):
        """The BareMetalHost provider's CRUD against the lab's BMC: wrong password and wrong serial refused in one
        line before anything changes; create on a powered-off host boots it and returns the VM's facts; the same
        inputs again are no change; virtual media inserted and ejected show in Redfish; no password in any log."""
        hosts = lab_hosts["result"].hosts
        creds = redfish.credentials()
        client = redfish.Client(creds)
        cycled, lines = hosts[0], []
        p, inputs = provider(creds, lines), host_inputs(hosts[0], creds)
        wrong = "not-the-" + creds.password[:4]
        with pytest.raises(BmcError, match=r"refused user .* logging in \(HTTP 401") as denied:
            p.create(props(inputs, wrong))
        with pytest.raises(BmcError, match=r"reports no SerialNumber; expected serial 'SN-WRONG-BOX'"):
            p.create(props(replace(inputs, serial="SN-WRONG-BOX"), creds.password))
        assert wrong not in str(denied.value) and client.power_state(cycled.uuid) == "On"
        client.reset(cycled.uuid, "ForceOff")  # a new box in the rack: powered off
        client.wait_power(cycled.uuid, "Off")
        outs = p.create(props(inputs, creds.password)).outs
        assert outs["power"] == "on" and client.power_state(cycled.uuid) == "On"
        assert any("powering on" in line for line in lines) and any("SSH answers" in line for line in lines)
        facts = outs["facts"]["host"]
        assert (facts["numa_nodes"], facts["cpus"]) == (len(SHAPE.node_mib), SHAPE.vcpus)
        assert 0.85 * SHAPE.memory_mib / 1024 < facts["memory_gib"] <= SHAPE.memory_mib / 1024
        nvme = [d for d in facts["sriov_devices"] if d["pci_id"] == "1b36:0010"]  # QEMU's NVMe controller
        assert [(d["numa_node"], d["sriov_totalvfs"]) for d in nvme] == [(SHAPE.sriov_node, SHAPE.sriov_vfs)]
        assert p.diff(outs["system_path"], outs, props(inputs, creds.password)).changes is False
        with served(b"\0" * 2048) as url:
            client.bmc.insert_media(cycled.uuid, url)
            assert media(client, cycled.uuid) == [("Cd", url)]
            client.bmc.eject_media(cycled.uuid, url)
            assert media(client, cycled.uuid) == []
        shown = "\n".join(lines) + "".join(capfd.readouterr())
        assert creds.password not in shown and wrong not in shown
        self.state["crud"] = (p, outs, inputs)

    def test_power_cycle_through_redfish_then_make_lab_changes_nothing_and_verifies(self, lab_hosts):
        hosts = lab_hosts["result"].hosts
        cycled = hosts[0]  # powered off and on again through Redfish by the test above
        ssh.wait(image.ssh_key(), cycled.ssh_port, 420, console=cycled.serial_log)
        if "rebooted" in self.state:  # the host rebooted mid-play two steps before: back, and it did reboot
            rebooted, booted = self.state["rebooted"]
            ssh.wait(image.ssh_key(), rebooted.ssh_port, 420, console=rebooted.serial_log)
            assert boot_id(rebooted) != booted
        # the re-converge is the README's `make lab` (gpufleet lab run: up, site.yml, verify, phases) on these hosts
        inventory = lab_hosts["inventory"].with_name("make-lab-hosts.yml")
        (REPO / "build/timings/lab-run-test.json").unlink(missing_ok=True)  # only this run's record may answer
        started = time.monotonic()
        proc = subprocess.run(
            ["make", "-s", "lab", f"LAB_ARGS=--prefix test --inventory {inventory}"],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        self.state["idempotent_seconds"] = time.monotonic() - started
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        record = load_record("lab-run-test", REPO)
        assert record and record["ok"], record
        assert record["changed"] == {h.name: 0 for h in hosts}, proc.stdout[-3000:]  # the cycled host and the other
        phases = {p["name"]: p for p in record["phases"]}
        assert phases["image"]["note"] == "cached" and phases["boot to SSH"]["note"] == "already running"
        assert phases["reboot"]["note"] == "none needed" and phases["verify"]["note"] == "ok"
        for name in ("setup (make setup)", "converge (site.yml)", "verify", "total"):
            assert name in proc.stdout, proc.stdout[-3000:]  # the phase table a user reads at the end
        for h in hosts:  # each host's state against its plan, as printed
            assert f"{h.name} (127.0.0.1:{h.ssh_port})  OK" in proc.stdout, proc.stdout[-3000:]
        for h in hosts:  # the power-cycled host and the one the first converge rebooted: the VF is still on vfio-pci
            assert_vf_on_vfio(h)

    def test_a_host_powered_off_mid_run_does_not_stop_the_other(self, lab_hosts):
        hosts = lab_hosts["result"].hosts
        client = redfish.Client(redfish.credentials())
        victim, survivor = hosts[1], hosts[0]
        running = threading.Event()
        holder: dict = {}

        def progress(line: str) -> None:
            if line.startswith("TASK [hugepages"):
                running.set()

        thread = threading.Thread(target=lambda: holder.setdefault("r", converge(lab_hosts, progress=progress)))
        creds = redfish.credentials()
        lines: list[str] = []
        retire = provider(creds, lines)
        # claimed as it runs (no boot: a host that is on keeps running), then retired mid-run
        unkeyed = host_inputs(victim, creds, ssh=SshSpec("127.0.0.1", victim.ssh_port))  # no key: no facts read
        claimed = retire.create(props(unkeyed, creds.password)).outs
        thread.start()
        assert running.wait(600), "the play never reached the roles"
        state = {k: v for k, v in claimed.items() if k != "password"}  # delete gets the outputs: no password there
        retire.delete(claimed["system_path"], state)  # `pulumi destroy` of the host mid-run: graceful, then ForceOff
        assert client.power_state(victim.uuid) == "Off" and any("powered off" in line for line in lines)
        thread.join(1800)
        result = holder["r"]
        assert result.recap[survivor.name]["failed"] == 0 and result.recap[survivor.name]["unreachable"] == 0
        assert result.recap[victim.name]["unreachable"] > 0 or result.recap[victim.name]["failed"] > 0
        # the survivor went through the whole play, verification included
        assert "Verify SR-IOV" in result.output

    def test_bare_metal_host_update_to_power_off_shuts_the_host_down(self, lab_hosts):
        p, outs, inputs = self.state["crud"]
        creds = redfish.credentials()
        off = replace(inputs, power="off")
        assert p.diff(outs["system_path"], outs, props(off, creds.password)).changes is True
        updated = p.update(outs["system_path"], outs, props(off, creds.password)).outs
        assert updated["power"] == "off" and redfish.Client(creds).power_state(inputs.system_id) == "Off"
        refreshed = p.read(outs["system_path"], {k: v for k, v in updated.items() if k != "password"})
        assert refreshed.outs["power"] == "off"  # `pulumi refresh` reads the BMC: no drift


def test_lab_without_libvirt_uses_qemu_directly_and_says_redfish_is_unavailable(lanes: Lanes):
    """`GPUFLEET_LAB_BACKEND=qemu gpufleet lab up`, status, a command on the host, `lab down`: run in the VM lane
    beside TestLab (tests/lab/direct_lab.py), checked here."""
    assert lanes.direct is not None
    run = lanes.direct.result()
    assert run.up.returncode == 0, run.up.stdout[-3000:] + run.up.stderr[-3000:]
    assert "Redfish BMCs are unavailable" in run.up.stdout
    (status,) = run.status
    assert status["power"] == "On" and status["ssh"] and status["backend"] == "qemu"
    assert "Linux version" in run.console  # the host's serial console
    assert run.numactl is not None and "available: 2 nodes" in run.numactl.stdout
    assert "gpufleet_bmc: null" in run.inventory
    assert run.down.returncode == 0, run.down.stdout + run.down.stderr
    assert json.loads(run.status_after.stdout) == []
    kept = [line.rsplit(" ", 1)[1] for line in run.down.stdout.splitlines() if "its console log is kept in" in line]
    assert len(kept) == 1 and "Linux version" in Path(kept[0]).read_text(errors="replace")  # readable after down


def test_two_lab_ups_of_one_lab_at_once_take_turns_and_end_with_one_lab(lanes: Lanes):
    """Two `gpufleet lab up --prefix twice` started at once (tests/lab/twice_lab.py, in the VM lane): both succeed,
    one after the other (the second says it waits for the first); whichever returns first, the host it hands over
    has its own name and its NVMe controller; one host in one state file, one inventory; `lab down` leaves none."""
    assert lanes.twice is not None
    run = lanes.twice.result()
    for up in run.ups:
        assert up.proc.returncode == 0, up.proc.stdout[-3000:] + up.proc.stderr[-3000:]
        assert up.host == ["twice-1", "1"], up.proc.stdout[-3000:]  # named, its NVMe controller bound
    waited = [up for up in run.ups if "waiting for another gpufleet lab command on lab 'twice'" in up.proc.stdout]
    assert len(waited) == 1, [up.proc.stdout for up in run.ups]  # they took turns
    assert "twice-1: SSH up (was running)" in waited[0].proc.stdout  # the second found the first's host
    assert "restored from the booted snapshot" not in waited[0].proc.stdout  # and did not restore it again
    assert run.ups[0].inventory == run.ups[1].inventory != ""
    assert [(h["name"], h["power"], h["ssh"]) for h in run.status] == [("twice-1", "On", True)]
    assert [h["name"] for h in json.loads(run.state)["hosts"]] == ["twice-1"]
    assert run.down.returncode == 0, run.down.stdout + run.down.stderr
    assert json.loads(run.status_after.stdout) == []
