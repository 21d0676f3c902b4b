"""The nvidia_driver role's install plan per platform (gpufleet.host.driver), and what it refuses before any change."""

from __future__ import annotations

import pytest

from gpufleet.host.driver import DriverPlanError, Platform, plan_driver

UBUNTU_2404 = Platform("Ubuntu", "Debian", "24", "noble", "6.8.0-51-generic")
UBUNTU_2204 = Platform("Ubuntu", "Debian", "22", "jammy", "5.15.0-130-generic")
DEBIAN_12 = Platform("Debian", "Debian", "12", "bookworm", "6.1.0-28-amd64")
RHEL_9 = Platform("RedHat", "RedHat", "9", "", "5.14.0-503.el9.x86_64")
ROCKY_9 = Platform("Rocky", "RedHat", "9", "", "5.14.0-503.el9.x86_64")
NVSWITCH = 4


def test_ubuntu_defaults_to_canonicals_server_open_packages_with_headers_for_the_running_kernel():
    plan = plan_driver(UBUNTU_2404, branch="580")
    assert plan.source == "ubuntu" and plan.package_manager == "apt" and plan.dkms
    assert plan.packages == ["nvidia-driver-580-server-open", "linux-headers-6.8.0-51-generic"]
    assert plan.fabric_manager == "" and plan.repository == {}
    assert plan.initramfs_command == ["update-initramfs", "-u", "-k", "all"]


def test_ubuntu_with_secure_boot_uses_the_signed_precompiled_modules_for_the_running_kernel():
    plan = plan_driver(UBUNTU_2204, branch="580", secure_boot=True)
    assert plan.packages[0] == "linux-modules-nvidia-580-server-open-5.15.0-130-generic"
    assert not any(p.startswith("linux-headers") or p.startswith("nvidia-driver-") for p in plan.packages)
    assert not plan.dkms


def test_ubuntu_proprietary_and_fabric_manager_on_nvswitch_hosts():
    plan = plan_driver(UBUNTU_2404, branch="570", kernel_modules="proprietary", nvswitches=NVSWITCH)
    assert plan.packages[0] == "nvidia-driver-570-server"
    assert plan.fabric_manager == "nvidia-fabricmanager-570"


@pytest.mark.parametrize(("platform", "distro"), [(UBUNTU_2404, "ubuntu2404"), (DEBIAN_12, "debian12")])
def test_cuda_repository_on_debian_and_ubuntu_pins_the_branch_then_installs_nvidia_open(platform, distro):
    plan = plan_driver(platform, branch="580", source="cuda", nvswitches=NVSWITCH)
    assert plan.repository["keyring_url"] == (
        f"https://developer.download.nvidia.com/compute/cuda/repos/{distro}/x86_64/cuda-keyring_1.1-1_all.deb"
    )
    assert plan.pinning_packages == ["nvidia-driver-pinning-580"]
    assert plan.packages == [f"linux-headers-{platform.kernel}", "nvidia-open"]
    assert plan.fabric_manager == "nvidia-fabricmanager-580"


def test_debian_defaults_to_the_cuda_repository_and_branches_from_590_have_unversioned_names():
    assert plan_driver(DEBIAN_12, branch="580").source == "cuda"
    plan = plan_driver(DEBIAN_12, branch="590", kernel_modules="proprietary", nvswitches=NVSWITCH)
    assert plan.packages[-1] == "cuda-drivers" and plan.fabric_manager == "nvidia-fabricmanager"


@pytest.mark.parametrize("platform", [RHEL_9, ROCKY_9])
def test_rhel_9_enables_the_branch_module_stream(platform):
    plan = plan_driver(platform, branch="580", nvswitches=NVSWITCH)
    assert plan.package_manager == "dnf" and plan.source == "cuda"
    assert plan.repository["repo_file_url"].endswith("/rhel9/x86_64/cuda-rhel9.repo")
    assert plan.module_stream == "nvidia-driver:580-open"
    assert plan.packages == [f"kernel-devel-{platform.kernel}", f"kernel-headers-{platform.kernel}", "nvidia-open"]
    assert plan.hold_patterns == ["*nvidia*580*"]
    assert plan.initramfs_command == ["dracut", "--force", "--regenerate-all"]
    assert plan_driver(platform, branch="580", kernel_modules="proprietary").module_stream == "nvidia-driver:580-dkms"


def test_debian_own_packages_add_the_non_free_components_and_install_the_open_dkms_module():
    plan = plan_driver(DEBIAN_12, branch="535", source="debian")
    assert plan.packages == [
        "nvidia-open-kernel-dkms",
        "nvidia-driver",
        "firmware-nvidia-gsp",
        "nvidia-persistenced",
        "nvidia-smi",
        "linux-headers-6.1.0-28-amd64",
    ]
    stanzas = plan.repository["stanzas"]
    assert [s["suites"] for s in stanzas] == [["bookworm", "bookworm-updates"], ["bookworm-security"]]
    assert all(s["components"] == ["contrib", "non-free", "non-free-firmware"] for s in stanzas)
    # bookworm-security updates nvidia-graphics-drivers but not the open modules' source package: the kernel
    # module decides the version and both sources are pinned to it
    assert plan.version_package == "nvidia-open-kernel-dkms"
    assert plan.pin_sources == ["nvidia-graphics-drivers", "nvidia-open-gpu-kernel-modules"]
    proprietary = plan_driver(DEBIAN_12, branch="535", source="debian", kernel_modules="proprietary")
    assert proprietary.packages[0] == "nvidia-kernel-dkms" == proprietary.version_package
    assert proprietary.pin_sources == ["nvidia-graphics-drivers"]
    # Debian's dkms.conf installs the modules as $PACKAGE_NAME (nvidia-current-open / nvidia-current), not nvidia
    assert (plan.kernel_module, proprietary.kernel_module) == ("nvidia-current-open", "nvidia-current")
    assert plan_driver(UBUNTU_2404, branch="580").kernel_module == "nvidia"
    assert plan_driver(DEBIAN_12, branch="580").kernel_module == "nvidia"  # NVIDIA's CUDA repository keeps the name


@pytest.mark.parametrize(
    ("platform", "options", "message"),
    [
        (DEBIAN_12, {"source": "debian"}, "Debian bookworm ships driver branch 535, not 580"),
        (DEBIAN_12, {"source": "ubuntu"}, "'ubuntu' is for Ubuntu; this host runs Debian 12: use 'cuda'"),
        (RHEL_9, {"source": "debian"}, "'debian' is for Debian"),
        (DEBIAN_12, {"branch": "535", "source": "debian", "nvswitches": 2}, "carry no Fabric Manager"),
        (UBUNTU_2404, {"kernel_modules": "closed"}, "use 'open' or 'proprietary'"),
        (UBUNTU_2404, {"branch": "r580"}, "is not a driver branch"),
        (Platform("Ubuntu", "Debian", "20", "focal", "5.4.0"), {"source": "cuda"}, "has no Ubuntu 20"),
        (Platform("SLES", "Suse", "15", "", "5.14"), {}, "SLES 15 is not supported"),
        (UBUNTU_2404, {"source": "apt"}, "use one of auto, ubuntu, cuda, debian"),
    ],
)
def test_what_cannot_work_is_refused_with_the_reason(platform, options, message):
    with pytest.raises(DriverPlanError, match=message.replace("(", r"\(")):
        plan_driver(platform, **{"branch": "580", **options})


def test_open_modules_are_refused_on_gpus_older_than_turing_and_proprietary_ones_are_not():
    with pytest.raises(DriverPlanError, match="open kernel modules do not support V100-SXM2-16GB"):
        plan_driver(UBUNTU_2404, branch="580", gpus_without_open_modules=["V100-SXM2-16GB"])
    assert plan_driver(
        UBUNTU_2404, branch="580", kernel_modules="proprietary", gpus_without_open_modules=["V100-SXM2-16GB"]
    ).packages[0] == ("nvidia-driver-580-server")


def test_proprietary_modules_are_refused_on_grace_hopper_and_blackwell_and_open_ones_are_not():
    with pytest.raises(DriverPlanError, match="proprietary kernel modules do not support B200-180GB, GH200-96GB"):
        plan_driver(
            UBUNTU_2404,
            branch="580",
            kernel_modules="proprietary",
            gpus_without_proprietary_modules=["GH200-96GB", "B200-180GB", "B200-180GB"],
        )
    assert plan_driver(UBUNTU_2404, branch="580", gpus_without_proprietary_modules=["B200-180GB"]).open_modules


@pytest.mark.parametrize("kernel_modules", ["open", "proprietary"])
def test_a_host_mixing_volta_and_blackwell_has_no_driver_flavour(kernel_modules):
    with pytest.raises(DriverPlanError, match=r"no kernel modules support both V100-SXM2-16GB .* and B200-180GB"):
        plan_driver(
            UBUNTU_2404,
            branch="580",
            kernel_modules=kernel_modules,
            gpus_without_open_modules=["V100-SXM2-16GB"],
            gpus_without_proprietary_modules=["B200-180GB"],
        )


def test_the_filter_finds_gpus_each_module_flavour_does_not_support_from_the_catalog():
    import importlib.util

    from ansible.errors import AnsibleFilterError

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("gpufleet_filters", REPO / "ansible/plugins/filter/gpufleet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    filters = module.FilterModule().filters()
    gpus = [{"model": "V100-SXM2-16GB"}, {"model": "H100-SXM5-80GB"}, {"model": None}, {"model": "V100-SXM2-16GB"}]
    unsupported = filters["gpufleet_kernel_modules_unsupported"]
    assert unsupported(gpus) == {"open": ["V100-SXM2-16GB"], "proprietary": []}
    assert unsupported(gpus[1:3]) == {"open": [], "proprietary": []}
    assert unsupported([{"model": "B200-180GB"}, {"model": "GH200-96GB"}]) == {
        "open": [],
        "proprietary": ["B200-180GB", "GH200-96GB"],
    }
    facts = {
        "distribution": "Ubuntu",
        "os_family": "Debian",
        "distribution_major_version": "24",
        "distribution_release": "noble",
        "kernel": "6.8.0-51-generic",
    }
    plan = filters["gpufleet_nvidia_driver_plan"](facts, {"branch": 580, "source": "auto", "gpus": gpus[1:3]})
    assert plan["packages"][0] == "nvidia-driver-580-server-open"
    with pytest.raises(AnsibleFilterError, match="nvidia_driver: open kernel modules do not support V100"):
        filters["gpufleet_nvidia_driver_plan"](facts, {"branch": "580", "gpus": gpus})
    with pytest.raises(AnsibleFilterError, match="nvidia_driver: proprietary kernel modules do not support B200"):
        filters["gpufleet_nvidia_driver_plan"](
            facts, {"branch": "580", "kernel_modules": "proprietary", "gpus": [{"model": "B200-180GB"}]}
        )
