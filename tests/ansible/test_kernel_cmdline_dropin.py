"""The kernel_cmdline role's GRUB drop-in, rendered by Ansible and then sourced by a shell the way update-grub
sources /etc/default/grub.d/*.cfg (the lab runs it for real; this pins the set semantics on many inputs)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.ansible_playbook import ansible_playbook
from tests.conftest import REPO, Shared

TEMPLATE = REPO / "roles/kernel_cmdline/templates/grub-dropin.cfg.j2"
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: Render the drop-ins
      ansible.builtin.template:
        src: "{{ template }}"
        dest: "{{ item.out }}"
        mode: "0644"
      loop: "{{ dropins }}"
      vars:
        kernel_cmdline_owner: "{{ item.owner }}"
        kernel_cmdline_args: "{{ item.args }}"
        kernel_cmdline_remove: "{{ item.remove }}"
"""


def render(tmp_path: Path, dropins: dict[str, tuple[str, list[str], list[str]]]) -> dict[str, Path]:
    """The drop-ins {name: (owner, args, remove)}, rendered by one run of Ansible: {name: its file}."""
    play, out = tmp_path / "play.yml", {name: tmp_path / f"60-{owner}.cfg" for name, (owner, _, _) in dropins.items()}
    play.write_text(PLAYBOOK)
    variables = {
        "template": str(TEMPLATE),
        "dropins": [
            {"out": str(out[name]), "owner": owner, "args": args, "remove": remove}
            for name, (owner, args, remove) in dropins.items()
        ],
    }
    proc = ansible_playbook(play, extra_vars=variables)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def grub_defaults(linux_default: str, linux: str, dropins: list[Path], times: int = 1) -> tuple[list[str], list[str]]:
    """Source the drop-ins after /etc/default/grub's two variables, as grub-mkconfig does (``times`` runs)."""
    script = f"GRUB_CMDLINE_LINUX_DEFAULT='{linux_default}'\nGRUB_CMDLINE_LINUX='{linux}'\n"
    script += "".join(f". '{d}'\n" for d in dropins) * times
    script += 'printf "%s\\n%s\\n" "$GRUB_CMDLINE_LINUX_DEFAULT" "$GRUB_CMDLINE_LINUX"\n'
    out = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL
    ).stdout.split("\n")
    return out[0].split(), out[1].split()


@pytest.fixture(scope="module")
def dropins(shared: Shared) -> dict[str, Path]:
    huge = ["default_hugepagesz=1G", "hugepagesz=1G", "hugepages=0:1,1:1"]
    cases = {
        "hugepages": ("gpufleet-hugepages", huge, []),
        "sriov": ("gpufleet-sriov", ["intel_iommu=on", "iommu=pt"], ["iommu=off"]),
        "quiet": ("molecule", [], ["quiet", "splash"]),
    }
    made = shared("dropins", lambda tmp_path: {name: str(path) for name, path in render(tmp_path, cases).items()})
    return {name: Path(path) for name, path in made.items()}


def test_arguments_are_appended_once_however_often_the_drop_in_is_sourced(dropins):
    default, linux = grub_defaults("quiet", "console=ttyS0", [dropins["hugepages"]], times=3)
    assert default == ["quiet"]
    assert linux == ["console=ttyS0", "default_hugepagesz=1G", "hugepagesz=1G", "hugepages=0:1,1:1"]


def test_an_argument_already_set_by_the_image_is_not_duplicated(dropins):
    # an image that already boots with one of the owner's arguments, in either variable
    default, linux = grub_defaults("iommu=pt quiet", "intel_iommu=on", [dropins["sriov"]])
    assert default == ["quiet"]
    assert linux == ["intel_iommu=on", "iommu=pt"]


def test_removed_arguments_leave_both_variables(dropins):
    # cloud images put theirs in GRUB_CMDLINE_LINUX_DEFAULT (50-cloudimg-settings.cfg): removal reaches there too
    default, linux = grub_defaults("quiet splash console=tty1", "iommu=off quiet", [dropins["quiet"], dropins["sriov"]])
    assert default == ["console=tty1"]
    assert linux == ["intel_iommu=on", "iommu=pt"]


def test_owners_keep_their_sets_apart(dropins):
    both = [dropins["hugepages"], dropins["sriov"]]
    _, linux = grub_defaults("", "", both, times=2)
    assert linux == ["default_hugepagesz=1G", "hugepagesz=1G", "hugepages=0:1,1:1", "intel_iommu=on", "iommu=pt"]
