"""The lab's file, unit and package effects, proven on system containers (systemd as PID 1, the lab image's Debian
12 tree, reached over SSH like the VM hosts; gpufleet/lab/container.py): what needs no kernel of its own runs here
at this machine's speed instead of under emulation. Kernel effects stay on the VMs (test_lab.py); docs/lab.md says
which proof runs where.
"""

from __future__ import annotations

import shlex

from gpufleet.lab import image, ssh
from gpufleet.lab.ansible_run import run_playbook
from tests.conftest import REPO

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
