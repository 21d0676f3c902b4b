"""ansible/playbooks/kubernetes.yml run for real by ansible-playbook on local connections: the toolkit on the host
with NVIDIA GPUs only, then the chart's values file and node manifests (values mode: no cluster here).

Two hosts of the bare-metal stack fixture read recorded trees (``gpufleet_host_root``): ``gpu-1`` a DGX H100 in the
MIG host group, ``cpu-1`` a host without GPUs. The toolkit is the ``preinstalled`` kind with no container engine to
configure (this machine has none); ``nvidia-ctk`` and the driver's version file are test doubles in a temporary
directory, so the CDI step runs as on a host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gpufleet.spec.load import load_stack
from tests.ansible_playbook import ansible_playbook
from tests.conftest import FIXTURES, Shared

STACK = FIXTURES / "gpu-software/Pulumi.prod-onprem.yaml"
INVENTORY = """\
all:
  vars: {{ansible_connection: local, ansible_python_interpreter: {python}}}
  children:
    hgx_mig: {{hosts: {{gpu-1: {{gpufleet_host_root: {hosts}/dgx-h100}}}}}}
    cpu: {{hosts: {{cpu-1: {{gpufleet_host_root: {hosts}/no-gpu}}}}}}
"""
# The double records each call and writes a spec the way `nvidia-ctk cdi generate --output=FILE` does.
FAKE_CTK = """\
#!/bin/sh
echo "$*" >> "$(dirname "$0")/ctk-calls"
for arg in "$@"; do case "$arg" in --output=*) out="${arg#--output=}";; esac; done
printf 'cdiVersion: 0.5.0\\nkind: nvidia.com/gpu\\ndevices: [{name: all}]\\n' > "$out"
"""


def run(tmp_path: Path, chart: str = "gpu_operator") -> tuple[int, str]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY.format(python=sys.executable, hosts=FIXTURES / "hosts"))
    for name, text in (("nvidia-ctk", FAKE_CTK), ("nvidia-container-runtime", "#!/bin/sh\n")):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    (tmp_path / "driver-version").write_text("580.95.05\n")
    result = ansible_playbook(
        "-i", inventory, "ansible/playbooks/kubernetes.yml",
        local=False,
        extra_vars={
            "gpufleet_stack": str(STACK),
            "gpufleet_gpu_chart": chart,
            "gpufleet_gpu_software_mode": "values",
            "gpufleet_values_dir": str(tmp_path / "helm"),
            "nvidia_container_toolkit_source": "preinstalled",
            "nvidia_container_toolkit_version": "",  # the double is no package: no version to compare
            "nvidia_container_toolkit_runtimes": [],
            "nvidia_container_toolkit_runtime_binary": str(tmp_path / "nvidia-container-runtime"),
            "nvidia_container_toolkit_ctk_binary": str(tmp_path / "nvidia-ctk"),
            "nvidia_container_toolkit_driver_version_file": str(tmp_path / "driver-version"),
            "nvidia_container_toolkit_cdi_spec": str(tmp_path / "cdi/nvidia.yaml"),
            "__nvidia_container_toolkit_cdi_stamp": str(tmp_path / "cdi-generated-for"),
        },
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def recap(output: str) -> dict[str, str]:
    lines = output[output.rindex("PLAY RECAP") :].splitlines()[1:]
    return {line.split()[0]: line for line in lines if " : ok=" in line}


@pytest.fixture(scope="module")
def operator_run(shared: Shared) -> tuple[Path, int, str, int, str]:
    """Two runs of the playbook with the GPU Operator chart: (directory, rc, output, second rc, second output)."""
    path, *runs = shared("kubernetes-operator", lambda tmp_path: (str(tmp_path), *run(tmp_path), *run(tmp_path)))
    return Path(path), *runs


def test_the_toolkit_runs_on_the_gpu_host_only_before_the_release(operator_run):
    tmp_path, rc, output, _, _ = operator_run
    assert rc == 0, output[-4000:]
    calls = (tmp_path / "ctk-calls").read_text().splitlines()
    assert calls == [f"cdi generate --output={tmp_path / 'cdi/nvidia.yaml'}"]  # once, for gpu-1
    assert "driver: 580.95.05" in (tmp_path / "cdi-generated-for").read_text()
    assert "cpu-1 has no NVIDIA GPU: no container toolkit" in output
    assert output.index("Run nvidia-ctk cdi generate") < output.index("PLAY [GPU software release and node labels]")


def test_the_operator_values_leave_driver_and_toolkit_to_the_host_roles(operator_run):
    tmp_path, rc, output, _, _ = operator_run
    assert rc == 0, output[-4000:]
    values = YAML(typ="safe").load((tmp_path / "helm/gpu-operator.values.yaml").read_text())
    assert values["driver"]["enabled"] is False and values["toolkit"]["enabled"] is False


def test_the_gpu_node_gets_its_host_groups_mig_layout_label(operator_run):
    tmp_path, rc, output, _, _ = operator_run
    assert rc == 0, output[-4000:]
    layout = next(g for g in load_stack(STACK).stack.baremetal.host_groups if g.name == "hgx_mig").mig.config_name
    assert layout == "h100-half-3g"
    node = YAML(typ="safe").load((tmp_path / "helm/gpu-operator.nodes/gpu-1.yaml").read_text())
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == layout


def test_a_second_run_changes_nothing(operator_run):
    _, rc, output, rc2, output2 = operator_run
    assert rc == 0 and rc2 == 0, output2[-4000:]
    assert " changed=0 " not in recap(output)["gpu-1"]  # the first run did change gpu-1 (spec, files)
    for host, line in recap(output2).items():
        assert " changed=0 " in line, f"{host}: {line}"


def test_the_device_plugin_chart_instead(tmp_path: Path):
    rc, output = run(tmp_path, chart="device_plugin")
    assert rc == 0, output[-4000:]
    assert (tmp_path / "helm/nvidia-device-plugin.values.yaml").is_file()
    assert not (tmp_path / "helm/gpu-operator.values.yaml").exists()


def test_an_unknown_chart_is_refused_with_the_choices(tmp_path: Path):
    rc, output = run(tmp_path, chart="gpu-operator")
    assert rc != 0
    assert "gpufleet_gpu_chart is 'gpu-operator'; use gpu_operator or device_plugin" in output
    assert not (tmp_path / "helm").exists()
