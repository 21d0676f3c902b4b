"""The DRA objects gpufleet generates for advertiser dra (gpufleet/kube/dra.py): claim templates per GPU model and MIG
profile whose CEL selects only on attributes the NVIDIA DRA driver publishes, valid resource.k8s.io/v1 objects for
every Kubernetes version from 1.34, a ComputeDomain where NVLink spans nodes, and Kueue's mappings."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, all_versions

from gpufleet.kube import dra
from gpufleet.plan.build import plan_stack
from gpufleet.spec.load import load_stack, load_stack_text
from gpufleet.spec.types import LABEL_KEY_RE
from tests.charts import chart_file, crd_errors, crd_validator, needs_charts
from tests.conftest import REPO, TODAY
from tests.stacks import release_block

DRA_STACK = REPO / "examples" / "dra" / "Pulumi.dev-eastus2.yaml"

# The attributes the driver publishes in the gpu.nvidia.com domain, by device type, written out from its source
# (kubernetes-sigs/dra-driver-nvidia-gpu at 95932046, 0.5.0-dev; the same names at tag v0.4.1):
# cmd/gpu-kubelet-plugin/deviceinfo.go GpuInfo.Attributes and addFabricManagerAttributes (whole GPUs),
# cmd/gpu-kubelet-plugin/mig.go CommonAttributesMig plus uuid in MigDeviceInfo.GetDevice (MIG devices).
# (pciBusID, pcieRoot and numaNode are published under resource.kubernetes.io, not gpu.nvidia.com.)
PUBLISHED = {
    "gpu": {
        "type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion",
        "cudaDriverVersion", "addressingMode", "gpuModuleID",
    },
    "mig": {
        "type", "uuid", "parentUUID", "profile", "productName", "brand", "architecture", "cudaComputeCapability",
        "driverVersion", "cudaDriverVersion", "addressingMode",
    },
}  # fmt: skip
ATTRIBUTE = re.compile(r"device\.attributes\['([^']+)'\]\.(\w+)")
DEVICE_TYPE = {dra.GPU_CLASS: "gpu", dra.MIG_CLASS: "mig"}
# Kubernetes versions that serve resource.k8s.io/v1 and whose schemas kubernetes-validate ships (1.25-1.37 here)
DRA_VERSIONS = sorted(
    {v for v in all_versions() if tuple(map(int, v.split(".")[:2])) >= (1, 34)},
    key=lambda v: tuple(map(int, v.split("."))),
)


def _stack_text(group: str, kubernetes: str = "1.36") -> str:
    return f"""config:
  gpufleet:stage: prod
  gpufleet:region: onprem
{release_block(kubernetes=kubernetes)}  gpufleet:baremetal:
    inventory: inventories/lab-local
    host_groups:
{group}"""


def _dra(text: str, catalog) -> dra.DraPlan | None:
    loaded = load_stack_text(text, "Pulumi.prod-onprem.yaml", today=TODAY)
    assert loaded.stack is not None, [str(d) for d in loaded.diagnostics]
    return dra.dra_plan(plan_stack(loaded.stack, catalog), catalog)


H100_MIG = """      - name: h100
        gpu_model: H100-SXM5-80GB
        gpus_per_host: 8
        advertiser: dra
        mig:
          config_name: h100-small
          devices:
            - gpus: {gpus}
              profiles: {{1g.10gb: 2, 3g.40gb: 1}}
"""


def attribute_problems(template: dra.ClaimTemplate) -> list[str]:
    """Attributes the template's CEL reads that the driver does not publish on its device class's devices."""
    kind = DEVICE_TYPE[template.device_class]
    return [
        f"{template.name}: {domain}/{name}"
        for domain, name in ATTRIBUTE.findall(template.selector)
        if domain != dra.GPU_DRIVER or name not in PUBLISHED[kind]
    ]


def test_an_h100_group_with_a_mig_layout_gets_exactly_its_profiles_templates(catalog):
    plan = _dra(_stack_text(H100_MIG.format(gpus="all")), catalog)
    assert plan is not None
    assert [t.name for t in plan.claim_templates] == ["gpu-h100-sxm5-80gb-1g10gb", "gpu-h100-sxm5-80gb-3g40gb"]
    small = plan.claim_templates[0].manifest()["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert small["deviceClassName"] == "mig.nvidia.com" and small["count"] == 1
    assert small["selectors"][0]["cel"]["expression"] == (
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
        " && device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    )
    assert plan.compute_domains == ()  # an HGX H100's NVLink stays inside the host


def test_gpus_the_layout_leaves_whole_get_the_whole_gpu_template_too(catalog):
    plan = _dra(_stack_text(H100_MIG.format(gpus="[0, 1, 2, 3]")), catalog)
    assert [t.name for t in plan.claim_templates] == [
        "gpu-h100-sxm5-80gb",
        "gpu-h100-sxm5-80gb-1g10gb",
        "gpu-h100-sxm5-80gb-3g40gb",
    ]
    assert plan.claim_templates[0].device_class == "gpu.nvidia.com"


def test_only_dra_groups_get_templates(catalog):
    groups = """      - name: l40s
        gpu_model: L40S
        gpus_per_host: 4
        advertiser: none
      - name: cpu
"""
    assert _dra(_stack_text(groups), catalog) is None


def test_every_selector_reads_only_attributes_the_driver_publishes(catalog):
    plans = [dra.dra_plan(plan_stack(load_stack(DRA_STACK, today=TODAY).stack, catalog), catalog)]
    plans.append(_dra(_stack_text(H100_MIG.format(gpus="[0, 1]")), catalog))
    templates = [t for p in plans for t in p.claim_templates]
    assert {t.device_class for t in templates} == {"gpu.nvidia.com", "mig.nvidia.com"}
    assert [p for t in templates for p in attribute_problems(t)] == []


def test_the_attribute_check_sees_an_attribute_the_driver_does_not_publish():
    wrong = dra.ClaimTemplate("H100-SXM5-80GB", ("NVIDIA H100 80GB HBM3",), "1g.10gb")
    mig_on_gpu = dra.ClaimTemplate("H100-SXM5-80GB", ("NVIDIA H100 80GB HBM3",))
    assert attribute_problems(wrong) == []
    assert attribute_problems(_replace_selector(wrong, "productName", "model")) == [
        "gpu-h100-sxm5-80gb-1g10gb: gpu.nvidia.com/model"
    ]
    # profile exists only on MIG devices: a whole-GPU template selecting on it would match nothing
    assert attribute_problems(_replace_selector(mig_on_gpu, "productName", "profile")) == [
        "gpu-h100-sxm5-80gb: gpu.nvidia.com/profile"
    ]


def _replace_selector(template: dra.ClaimTemplate, old: str, new: str) -> dra.ClaimTemplate:
    class Edited(dra.ClaimTemplate):
        @property
        def selector(self) -> str:
            return super().selector.replace(f".{old}", f".{new}")

    return Edited(template.gpu_model, template.product_names, template.mig_profile)


def test_a_gpu_with_two_product_names_is_selected_by_either(catalog):
    template = dra.ClaimTemplate("T4", catalog.gpu("T4").product_names)
    assert template.selector == "device.attributes['gpu.nvidia.com'].productName in ['Tesla T4', 'NVIDIA T4']"
    for name in template.product_names:
        assert catalog.find_gpu(name).name == "T4"  # the names the selector uses are the model's


@pytest.fixture(scope="module")
def example(catalog) -> dra.DraPlan:
    loaded = load_stack(DRA_STACK, today=TODAY)
    assert loaded.stack is not None, [str(d) for d in loaded.diagnostics]
    plan = dra.dra_plan(plan_stack(loaded.stack, catalog), catalog)
    assert plan is not None
    return plan


def test_the_example_stack_gets_one_template_per_model_and_aks_mig_profile(example):
    assert [(t.name, t.targets) for t in example.claim_templates] == [
        ("gpu-h100-nvl-94gb", ("h100",)),
        ("gpu-h100-nvl-94gb-3g47gb", ("h100mig",)),  # AKS's MIG3g: two 3g.47gb per H100 NVL, no whole GPU left
        ("gpu-gb200-186gb", ("gb200",)),
    ]


@pytest.mark.parametrize("version", DRA_VERSIONS)
def test_claim_templates_and_device_classes_pass_kubernetes_validate(example, version):
    objects = [o for o in example.objects() if o["kind"] == "ResourceClaimTemplate"]
    objects += example.device_class_objects()
    assert {o["kind"] for o in objects} == {"ResourceClaimTemplate", "DeviceClass"}
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)


def test_kubernetes_validate_knows_resource_v1_from_1_34_and_refuses_a_broken_template(example):
    assert DRA_VERSIONS[0] == "1.34.0"
    template = example.objects()[0]
    with pytest.raises(SchemaNotFoundError):
        kubernetes_validate.validate(template, "1.33.0", strict=True)  # resource.k8s.io/v1 is not served yet
    broken = yaml.safe_load(yaml.safe_dump(template))
    broken["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClass"] = "gpu.nvidia.com"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, DRA_VERSIONS[0], strict=True)


def test_every_template_names_a_device_class_the_gpu_cluster_installs(example):
    installed = {c.name for c in example.device_classes}
    assert {t.device_class for t in example.claim_templates} <= installed
    # with a GB200 pool (NVLink across nodes) the ComputeDomain classes come too
    assert {"compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com"} <= installed


@needs_charts
def test_the_compute_domain_example_passes_the_charts_crd(example):
    crd = yaml.safe_load(chart_file("gpu-operator", "crds/resource.nvidia.com_computedomains.yaml"))
    version = next(v for v in crd["spec"]["versions"] if v["storage"])
    validator = crd_validator(version["schema"]["openAPIV3Schema"])
    (domain,) = [o for o in example.objects() if o["kind"] == "ComputeDomain"]
    assert domain["apiVersion"] == f"{crd['spec']['group']}/{version['name']}"
    assert domain["metadata"]["name"] == "gb200-nvlink"
    assert crd_errors(validator, domain) == []
    assert crd_errors(validator, {**domain, "spec": {"numNodes": 0}}) != []  # the check sees a missing channel


# Kueue's checks of a DeviceClassMapping (kubernetes-sigs/kueue v0.19.2 pkg/config/validation.go,
# validateDeviceClassMappings): name and each deviceClassName pass content.IsLabelKey (a qualified name, as a label
# key) and are at most 253 characters; no name twice; a class in one mapping only (without counter sources).
QUALIFIED = LABEL_KEY_RE


def test_kueue_maps_each_class_the_templates_use_to_one_resource(example):
    config = example.kueue_configuration()
    assert (config["apiVersion"], config["kind"]) == ("config.kueue.x-k8s.io/v1beta2", "Configuration")
    mappings = config["resources"]["deviceClassMappings"]
    assert mappings == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["gpu.nvidia.com"]},
        {"name": "nvidia.com/mig", "deviceClassNames": ["mig.nvidia.com"]},
    ]
    classes = [c for m in mappings for c in m["deviceClassNames"]]
    assert len(classes) == len(set(classes))  # Kueue refuses a class mapped to two names
    assert len({m["name"] for m in mappings}) == len(mappings)
    for m in mappings:
        assert QUALIFIED.fullmatch(m["name"]) and len(m["name"]) <= 253
        assert all(QUALIFIED.fullmatch(c) and len(c) <= 253 for c in m["deviceClassNames"])
