"""The lab's file, unit and package effects, proven on system containers (systemd as PID 1, the lab image's Debian
12 tree, reached over SSH like the VM hosts; gpufleet/lab/container.py): what needs no kernel of its own runs here
at this machine's speed instead of under emulation. Kernel effects stay on the VMs (test_lab.py); docs/lab.md says
which proof runs where.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Iterator

import pytest

from gpufleet.lab import image, ssh
from gpufleet.lab.ansible_run import run_playbook
from gpufleet.lab.container import ContainerHost
from tests.conftest import REPO
from tests.lab.standins import FAKE_AMD
from tests.lab.standins.amd_repo import MARKERS, Served, amd_repositories, debian_repository

IMEX_UNIT_FILE = "/usr/lib/systemd/system/nvidia-imex.service"  # a package's unit: `systemctl mask` replaces it
IMEX_STANDIN = (
    "[Unit]",
    "Description=TEST DOUBLE of nvidia-imex (gpufleet lab test): a oneshot unit running /bin/true",
    "[Service]",
    "Type=oneshot",
    "RemainAfterExit=yes",
    "ExecStart=/bin/true",
    "[Install]",
    "WantedBy=multi-user.target",
)
IMEX_PLAY = """
- name: The nvidia_driver role's imex tasks, as site.yml runs them on a DRA ComputeDomain host group
  hosts: all
  gather_facts: false
  tasks:
    - name: Mask nvidia-imex (what the plan's compute_domains sets for advertiser dra with NVLink across hosts)
      ansible.builtin.include_role:
        name: nvidia_driver
        tasks_from: imex
      vars:
        nvidia_driver_mask_imex: true
"""


def remote(host, command: str) -> str:
    proc = ssh.run(image.ssh_key(), host.ssh_port, command, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


class TestContainers:
    def test_the_container_runs_systemd_as_pid_1_with_no_failed_unit(self, container_hosts):
        """What the steps below stand on: a booted Debian 12 with systemd, not a chroot."""
        host = container_hosts["result"].hosts[0]
        state = remote(
            host, "systemctl is-system-running --wait; ps -o comm= -p 1; . /etc/os-release; echo $VERSION_ID"
        )
        assert state.split() == ["running", "systemd", "12"], state
        assert remote(host, "systemctl list-units --failed --plain --no-legend").strip() == ""

    def test_the_driver_role_masks_nvidia_imex_where_dra_runs_compute_domains(self, container_hosts, tmp_path):
        """The driver role's imex tasks alone, on a host with a TEST DOUBLE of nvidia-imex.service (a oneshot unit
        running /bin/true, enabled and started, where the nvidia-imex package puts its unit), with the variable
        site.yml sets on a host group whose advertiser is dra and whose NVLink spans hosts: masked and stopped; a
        second run changes nothing. No package, no reboot."""
        host = container_hosts["result"].hosts[0]
        remote(host, f"printf '%s\\n' {' '.join(shlex.quote(line) for line in IMEX_STANDIN)} > {IMEX_UNIT_FILE}"
                     " && systemctl daemon-reload && systemctl enable --now nvidia-imex.service")  # fmt: skip
        assert remote(host, "systemctl is-active nvidia-imex.service").strip() == "active"
        play = tmp_path / "imex.yml"
        play.write_text(IMEX_PLAY)
        try:
            first = run_playbook(play, container_hosts["inventory"], limit=host.name, repo=REPO)
            assert first.rc == 0, first.output[-3000:]
            assert first.recap[host.name]["changed"] == 2, first.output[-3000:]  # masked, stopped
            state = remote(host, "systemctl is-enabled nvidia-imex.service; systemctl is-active nvidia-imex.service; :")
            assert state.split() == ["masked", "inactive"]
            second = run_playbook(play, container_hosts["inventory"], limit=host.name, repo=REPO)
            assert second.rc == 0 and second.recap[host.name]["changed"] == 0, second.output[-3000:]
        finally:  # the next step's container as it was
            remote(host, "systemctl unmask nvidia-imex.service; systemctl disable --now nvidia-imex.service;"
                         f" rm -f {IMEX_UNIT_FILE}; systemctl daemon-reload")  # fmt: skip

    def test_nvidia_driver_check_mode_reports_the_install_and_changes_nothing(self, container_hosts):
        """The driver role in check mode on a fresh Debian 12 host (Debian's packages; `make test-slow` installs them
        on a VM)."""
        host = container_hosts["result"].hosts[0]
        snapshot = (
            "dpkg-query -W -f '${Package} ${Version}\\n' | sha256sum; apt-mark showhold;"
            " ls -la --time-style=full-iso /etc/apt/sources.list.d /etc/modprobe.d /etc/systemd/system | sha256sum"
        )
        before = remote(host, snapshot)
        result = run_playbook(
            REPO / "roles/nvidia_driver/molecule/default/check.yml",
            container_hosts["inventory"],
            {},
            check=True,
            limit=host.name,
            repo=REPO,
        )
        assert result.rc == 0, result.output[-3000:]
        assert result.recap[host.name]["changed"] > 0, result.output[-3000:]
        assert "would install nvidia-open-kernel-dkms, nvidia-driver, firmware-nvidia-gsp" in result.output
        assert remote(host, snapshot) == before

    # -- AMD (amd_lab: the container made an AMD host of test doubles; the tests below run in this order) -----------

    def test_amd_roles_install_amds_pinned_packages_over_debians_and_set_the_partitions(self, amd_lab, container_hosts):
        host = amd_lab["host"]
        result = amd_play(amd_lab, container_hosts)
        assert result.rc == 0, result.output[-4000:]
        # AMD's packages at the release's versions: rocminfo replaced Debian's 5.2.3-2, which sorts above it
        kernel = os.uname().release
        names = " ".join([*AMD_PACKAGES, f"linux-headers-{kernel}"])
        installed = dict(
            line.split("=", 1)
            for line in remote(host, f"dpkg-query -W -f '${{Package}}=${{Version}}\\n' {names}").split()
        )
        assert installed == {**AMD_PACKAGES, f"linux-headers-{kernel}": "1"}
        assert remote(host, f"cat /{MARKERS}/rocminfo") == "rocminfo 1.0.0.70001-42~22.04\n"
        # the pin decides: with it AMD's version is the candidate (priority 1001), without it Debian's would be
        policy = remote(host, "apt-cache policy rocminfo")
        assert (
            "Candidate: 1.0.0.70001-42~22.04" in policy and f"1001 {amd_lab['url']}/rocm/apt/7.0.1 jammy/main" in policy
        )
        unpinned = remote(host, "apt-cache -o Dir::Etc::PreferencesParts=/nonexistent policy rocminfo")
        assert "Candidate: 5.2.3-2" in unpinned, unpinned
        assert remote(host, "grep -v '^#' /etc/apt/preferences.d/gpufleet-amd.pref") == (
            "Package: *\nPin: origin 127.0.0.1\nPin-Priority: 1001\n"
        )
        sources = remote(host, "cat /etc/apt/sources.list.d/gpufleet-amd.sources")
        assert f"URIs: {amd_lab['url']}/amdgpu/30.10.1/ubuntu\nSuites: jammy\n" in sources
        assert sources.count("Signed-By: /etc/apt/keyrings/rocm.asc") == 2
        assert remote(host, "cat /etc/apt/keyrings/rocm.asc") == amd_lab["key"]
        assert "kernel.numa_balancing = 0" in remote(host, "cat /etc/sysctl.d/60-gpufleet-amd.conf").splitlines()
        # the kernel argument waits in GRUB's drop-in for the play's one update-grub and reboot
        assert "iommu=pt" in remote(host, "cat /etc/default/grub.d/60-gpufleet-amdgpu.cfg")
        said = json.loads(remote(host, "cat /root/gpufleet-amd-roles.json"))
        assert said["kernel_cmdline_pending"] == [
            {"owner": "gpufleet-amdgpu", "args": ["iommu=pt"], "reboot_ok": False}
        ]
        assert said["driver_reboot_required"] is True and said["reload_required"] is False
        # the partitions: NPS4 by a driver reload (which put every GPU in CPX), then QPX on GPUs 0-1; GPU 7 skipped
        assert sysfs_modes(host) == ["QPX/NPS4"] * 2 + ["CPX/NPS4"] * 6
        view = smi_view(host)
        assert view[:5] == [("QPX", "NPS4", "0"), ("QPX", "NPS4", "1"), ("QPX", "NPS4", "2"), ("QPX", "NPS4", "3"),
                            ("QPX", "NPS4", "0")]  # fmt: skip
        assert len(view) == 2 * 4 + 6 * 8 and [v[2] for v in view].count("0") == 8
        state = json.loads(remote(host, "cat /var/lib/gpufleet-fake-amd/state.json"))
        assert state["log"].count("driver reloaded") == 1 and not [e for e in state["log"] if e.startswith("refused")]

    def test_amd_roles_run_again_change_nothing(self, amd_lab, container_hosts):
        result = amd_play(amd_lab, container_hosts)
        assert result.rc == 0, result.output[-4000:]
        assert result.recap[amd_lab["host"].name]["changed"] == 0, result.output[-4000:]
        assert (
            json.loads(remote(amd_lab["host"], "cat /var/lib/gpufleet-fake-amd/state.json"))["log"].count(
                "driver reloaded"
            )
            == 1
        )

    def test_amd_roles_in_check_mode_report_fresh_changes_and_change_nothing(self, amd_lab, container_hosts):
        """Two fresh changes: GPU 0 set to CPX with the stand-in amd-smi, the sysctl file removed."""
        host = amd_lab["host"]
        remote(
            host, "/opt/rocm/bin/amd-smi set --gpu 0 --compute-partition CPX && rm /etc/sysctl.d/60-gpufleet-amd.conf"
        )
        before = remote(host, AMD_SNAPSHOT)
        result = amd_play(amd_lab, container_hosts, check=True)
        assert result.rc == 0, result.output[-4000:]
        assert result.recap[host.name]["changed"] == 2, result.output[-4000:]  # the sysctl file, GPU 0's mode
        lines = result.output.splitlines()
        device = f"{AMD_SYSFS}/bus/pci/devices/0000:05:00.0/current_compute_partition"
        assert f"-{device}: CPX" in lines and f"+{device}: QPX" in lines
        assert remote(host, AMD_SNAPSHOT) == before
        assert sysfs_modes(host)[0] == "CPX/NPS4"

    def test_an_amd_memory_change_without_a_reload_stays_pending_and_says_so(self, amd_lab, container_hosts):
        host = amd_lab["host"]
        before = remote(host, AMD_SNAPSHOT)
        back = {
            "amd_partition_memory": "NPS1",
            "amd_partition_groups": [{"compute": "SPX", "gpus": "all"}],
            "amd_partition_skipped_gpus": [],
            "amd_partition_reload_ok": False,
            "amd_lab_roles": ["amd_partition"],
        }
        result = amd_play(amd_lab, container_hosts, **back)
        assert result.rc == 2, result.output[-4000:]  # the verify task fails
        assert result.recap[host.name]["changed"] == 0 and result.recap[host.name]["failed"] == 1
        assert "amd_partition_reload_ok is false: nothing changed; the compute partitions wait for the reload too" in (
            result.output
        )
        assert (
            "GPUs 0-7: memory partition NPS4, planned NPS1 (amd-smi): it takes a driver reload (modprobe -r amdgpu &&"
            " modprobe amdgpu), which amd_partition_reload_ok does not allow" in result.output
        )
        assert json.loads(remote(host, "cat /root/gpufleet-amd-roles.json"))["reload_required"] is True
        assert remote(host, AMD_SNAPSHOT) == before
        assert {m for _, m, _ in smi_view(host)} == {"NPS4"}


# -- AMD: the amd_driver and amd_partition roles on stand-in repositories and GPUs --------------------------------

AMD_PLAY = """
- name: AMD's driver and partitions on stand-in repositories and GPUs (the lab's AMD proof)
  hosts: all
  gather_facts: false
  vars:
    kernel_cmdline_defer_update: true  # as site.yml: the play regenerates grub.cfg once (a container boots no GRUB)
  tasks:
    - name: The amd_driver role
      ansible.builtin.include_role:
        name: amd_driver
      when: "'amd_driver' in amd_lab_roles"
    - name: The amd_partition role
      ansible.builtin.include_role:
        name: amd_partition
    - name: Keep what the roles say
      ansible.builtin.copy:
        content: >-
          {{ {'driver_reboot_required': amd_driver_reboot_required | default(none),
              'reload_required': amd_partition_reload_required,
              'kernel_cmdline_pending': kernel_cmdline_pending | default([])} | to_json }}
        dest: /root/gpufleet-amd-roles.json
        mode: "0600"
      changed_when: false
      check_mode: false
    - name: Verify AMD's packages
      ansible.builtin.include_role:
        name: amd_driver
        tasks_from: verify
      when: "'amd_driver' in amd_lab_roles and not ansible_check_mode"
    - name: Verify the partitions
      ansible.builtin.include_role:
        name: amd_partition
        tasks_from: verify
      when: not ansible_check_mode
"""
STANDIN_DIR = "usr/local/lib/gpufleet-test-double"  # the amdgpu test double (fake_amd.py) in the container
AMD_SYSFS = "/var/lib/gpufleet-fake-amd/sys"  # fake_amd.py's default tree
DEBIAN_STANDIN = "srv/gpufleet-debian-test-double"
AMD_PACKAGES = {
    "amdgpu-dkms": "1:6.14.14.30100100-2212064.22.04",
    "amd-smi-lib": "26.0.1.70001-42~22.04",
    "rocminfo": "1.0.0.70001-42~22.04",
    "rocm-smi-lib": "7.8.0.70001-42~22.04",
}
# GPUs 0-1 QPX, 2-6 CPX, GPU 7 left as it is, all in NPS4 (from SPX/NPS1: a memory change, so a driver reload)
AMD_PLAN = {
    "amd_partition_memory": "NPS4",
    "amd_partition_groups": [{"compute": "QPX", "gpus": 2}, {"compute": "CPX", "gpus": "all"}],
    "amd_partition_skipped_gpus": [7],
    "amd_partition_reload_ok": True,
    "amd_partition_sysfs_root": AMD_SYSFS,
    "amd_partition_reload_command": ["python3", f"/{STANDIN_DIR}/fake_amd.py", "reload"],
}
AMD_SNAPSHOT = (
    "dpkg-query -W -f '${Package} ${Version}\\n' | sha256sum; cat /var/lib/gpufleet-fake-amd/state.json | sha256sum;"
    " find /var/lib/gpufleet-fake-amd /etc/apt /etc/sysctl.d /etc/default/grub.d -type f -print0 | sort -z |"
    " xargs -0 sha256sum"
)


def smi_view(host) -> list[tuple[str, str, str]]:
    """(COMPUTE_PARTITION, MEMORY_PARTITION, PARTITION_ID) of each GPU of the stand-in amd-smi's
    ``static --partition``, run in the container from the stand-in amd-smi-lib package."""
    out = remote(host, "/opt/rocm/bin/amd-smi static --partition")
    entries = []
    for block in out.strip().split("\n\n"):
        fields = dict(line.strip().split(": ", 1) for line in block.splitlines() if ": " in line)
        entries.append((fields["COMPUTE_PARTITION"], fields["MEMORY_PARTITION"], fields["PARTITION_ID"]))
    return entries


def sysfs_modes(host) -> list[str]:
    """compute/memory of each stand-in GPU, as its partition files read."""
    each = "echo $(cat $d/current_compute_partition)/$(cat $d/current_memory_partition)"
    return remote(host, f"cd {AMD_SYSFS}/bus/pci/devices && for d in *; do {each}; done").split()


@pytest.fixture(scope="class")
def amd_lab(container_hosts, tmp_path_factory) -> Iterator[dict]:
    """The container made an AMD host of TEST DOUBLES (tests/lab/standins/amd_repo.py, fake_amd.py): AMD's two
    repositories signed with a key made for the test and served over HTTP on 127.0.0.1 (the container shares this
    machine's network, so apt's origin is that host, as repo.radeon.com is on a real host); Debian's archive replaced
    by a local one carrying Debian 12's rocminfo and rocm-smi 5.2.3-2 and the running kernel's headers, with its
    rocminfo 5.2.3-2 installed (what a host may have before); eight stand-in MI300X GPUs in SPX/NPS1."""
    host = container_hosts["result"].hosts[0]
    root = ContainerHost(host.name, host.ssh_port).root
    tmp = tmp_path_factory.mktemp("amd")
    paths = amd_repositories(tmp / "srv", tmp / "gnupg")
    debian_repository(root / DEBIAN_STANDIN, os.uname().release)  # the container runs this machine's kernel
    (root / STANDIN_DIR).mkdir(parents=True, exist_ok=True)
    shutil.copy(FAKE_AMD, root / STANDIN_DIR / "fake_amd.py")
    served = Served(tmp / "srv")
    try:
        debian = f"deb [trusted=yes] file:/{DEBIAN_STANDIN} ./"
        remote(host, "mv /etc/apt/sources.list /etc/apt/sources.list.gpufleet-test-aside"  # no network: the stand-ins
                     f" && echo '{debian}' > /etc/apt/sources.list.d/debian-test-double.list"
                     " && apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q rocminfo=5.2.3-2"
                     f" && python3 /{STANDIN_DIR}/fake_amd.py build --gpus 8")  # fmt: skip
        yield {
            "host": host,
            "play": tmp / "amd.yml",
            "key": (tmp / "srv" / paths["key"]).read_text(),
            "url": served.url,
            "vars": {
                "amd_driver_amdgpu_repo": f"{served.url}/{paths['amdgpu']}",
                "amd_driver_rocm_repo": f"{served.url}/{paths['rocm']}",
                "amd_driver_key_url": f"{served.url}/{paths['key']}",
                "amd_lab_roles": ["amd_driver", "amd_partition"],
                **AMD_PLAN,
            },
        }
    finally:
        served.close()


def amd_play(amd_lab, container_hosts, check: bool = False, **changes):
    """AMD_PLAY on the container, with the stand-ins' variables (and ``changes``)."""
    amd_lab["play"].write_text(AMD_PLAY)
    return run_playbook(
        amd_lab["play"], container_hosts["inventory"], amd_lab["vars"] | changes, check=check,
        limit=amd_lab["host"].name, repo=REPO,
    )  # fmt: skip
