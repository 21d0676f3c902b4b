"""How the NVIDIA driver is installed on a host: source, repository, packages, holds, initramfs, Fabric Manager.

Pure: the ``nvidia_driver`` role resolves its platform through this (filter ``gpufleet_nvidia_driver_plan``) and
refuses, before touching the host, what cannot work: a source the platform does not have, open kernel modules on
GPUs older than Turing, proprietary ones on Grace Hopper and Blackwell, Fabric Manager from a source that does not
ship it, a branch a source does not carry.

Sources:
- ``ubuntu``: Canonical's NVIDIA server drivers (``nvidia-driver-<branch>-server-open``); with Secure Boot on, the
  signed precompiled ``linux-modules-nvidia-<branch>-server-open-<kernel>`` instead of DKMS.
- ``cuda``: NVIDIA's CUDA repository. Debian/Ubuntu: the ``cuda-keyring`` package, the branch pinning package
  ``nvidia-driver-pinning-<branch>``, then ``nvidia-open`` (or ``cuda-drivers`` for proprietary modules). RHEL 9:
  the ``nvidia-driver:<branch>-open`` (or ``<branch>-dkms``) module stream, then ``nvidia-open`` / ``cuda-drivers``.
- ``debian``: Debian's own packages from contrib / non-free / non-free-firmware: ``nvidia-open-kernel-dkms`` (or
  ``nvidia-kernel-dkms``), ``nvidia-driver``, ``firmware-nvidia-gsp``; one branch per Debian release.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Source = Literal["ubuntu", "cuda", "debian"]
SOURCES: dict[str, tuple[str, ...]] = {
    "ubuntu": ("Ubuntu",),
    "cuda": ("Ubuntu", "Debian", "RedHat"),
    "debian": ("Debian",),
}
CUDA_DISTROS: dict[str, dict[str, str]] = {
    "Ubuntu": {"22": "ubuntu2204", "24": "ubuntu2404"},
    "Debian": {"12": "debian12"},
    "RedHat": {"9": "rhel9"},
}
# Debian's own driver branch per release (nvidia-graphics-drivers in <codename> non-free)
DEBIAN_BRANCHES: dict[str, str] = {"bookworm": "535", "trixie": "550"}
CUDA_KEYRING = "cuda-keyring_1.1-1_all.deb"
# From branch 590 the CUDA repository's Debian/Ubuntu packages lose the branch in their names
UNVERSIONED_NAMES_FROM = 590


class DriverPlanError(ValueError):
    """The requested driver cannot be installed this way; the message says why and what would work."""


@dataclass(frozen=True)
class Platform:
    """The few facts the plan needs (Ansible: distribution, os_family, distribution_major_version, ..._release,
    kernel)."""

    distribution: str
    os_family: str
    major_version: str
    codename: str
    kernel: str

    @classmethod
    def from_facts(cls, facts: Mapping[str, Any]) -> Platform:
        """From Ansible's fact names (distribution, os_family, distribution_major_version, distribution_release,
        kernel): the setup module's, or gpufleet.host.driverstate.read_platform's."""
        return cls(
            distribution=facts.get("distribution", ""),
            os_family=facts.get("os_family", ""),
            major_version=str(facts.get("distribution_major_version", "")),
            codename=facts.get("distribution_release", ""),
            kernel=facts.get("kernel", ""),
        )

    @property
    def family(self) -> str:
        """Ubuntu, Debian or RedHat (RHEL and its rebuilds)."""
        if self.os_family == "RedHat":
            return "RedHat"
        if self.distribution in ("Ubuntu", "Debian"):
            return self.distribution
        raise DriverPlanError(
            f"{self.distribution} {self.major_version} is not supported: the role knows Ubuntu, Debian and RHEL 9"
        )


@dataclass(frozen=True)
class DriverPlan:
    source: Source
    family: str
    package_manager: Literal["apt", "dnf"]
    branch: str
    open_modules: bool
    secure_boot: bool
    # The repository to configure: apt sources (deb822 stanzas) or a .repo URL / keyring package
    repository: dict[str, Any]
    # Installed first (the branch pinning package), then ``packages``
    pinning_packages: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    module_stream: str = ""  # dnf module to enable (RHEL)
    # The package that carries the driver's version (whose candidate must belong to the branch)
    version_package: str = ""
    fabric_manager: str = ""  # package name, empty when the host has no NVSwitch
    # apt: source packages pinned (apt_preferences, priority 1001) to the version_package's candidate version, so
    # every piece of the driver comes from one version even when a suite updates only some of them
    pin_sources: list[str] = field(default_factory=list)
    hold_patterns: list[str] = field(default_factory=list)  # apt: dpkg name globs to hold; dnf: versionlock specs
    initramfs_command: list[str] = field(default_factory=list)
    dkms: bool = True
    # The kernel module's file name, for modinfo: Debian's packages rename nvidia.ko to nvidia-current-open.ko
    # (nvidia-current.ko for the proprietary one) and load it through `install nvidia ...` lines of modprobe.d, so
    # `modinfo nvidia` finds nothing there; the loaded module is still called nvidia (/sys/module/nvidia)
    kernel_module: str = "nvidia"
    # The modprobe.d file that blacklists nouveau (written before the packages, so their initramfs carries it)
    nouveau_blacklist: str = "/etc/modprobe.d/gpufleet-blacklist-nouveau.conf"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_modules(
    open_modules: bool, gpus_without_open_modules: Iterable[str], gpus_without_proprietary_modules: Iterable[str]
) -> None:
    old = sorted(set(gpus_without_open_modules))
    new = sorted(set(gpus_without_proprietary_modules))
    if old and new:
        raise DriverPlanError(
            f"no kernel modules support both {', '.join(old)} (older than Turing: proprietary modules only) and "
            f"{', '.join(new)} (Grace Hopper / Blackwell: open modules only), per gpufleet's catalog: "
            "put these GPUs in different hosts"
        )
    if open_modules and old:
        raise DriverPlanError(
            f"open kernel modules do not support {', '.join(old)} (older than Turing, per gpufleet's catalog): "
            "set nvidia_driver_kernel_modules: proprietary for this host"
        )
    if not open_modules and new:
        raise DriverPlanError(
            f"proprietary kernel modules do not support {', '.join(new)} (NVIDIA supports only the open modules on "
            "Grace Hopper and Blackwell, per gpufleet's catalog): set nvidia_driver_kernel_modules: open"
        )


def plan_driver(
    platform: Platform,
    *,
    branch: str,
    kernel_modules: str = "open",
    source: str = "auto",
    secure_boot: bool = False,
    gpus_without_open_modules: Iterable[str] = (),
    gpus_without_proprietary_modules: Iterable[str] = (),
    nvswitches: int = 0,
    cuda_repo_base: str = "https://developer.download.nvidia.com/compute/cuda/repos",
    debian_mirror: str = "http://deb.debian.org/debian",
    debian_security_mirror: str = "http://deb.debian.org/debian-security",
) -> DriverPlan:
    """The install plan for one host, or :class:`DriverPlanError` saying what cannot work and what would."""
    if not branch.isdigit():
        raise DriverPlanError(f"nvidia_driver_branch {branch!r} is not a driver branch such as '580'")
    if kernel_modules not in ("open", "proprietary"):
        raise DriverPlanError(f"nvidia_driver_kernel_modules {kernel_modules!r}: use 'open' or 'proprietary'")
    open_modules = kernel_modules == "open"
    _check_modules(open_modules, gpus_without_open_modules, gpus_without_proprietary_modules)
    source = _source(platform, source)
    family = platform.family
    common: dict[str, Any] = {
        "source": source,
        "family": family,
        "package_manager": "dnf" if family == "RedHat" else "apt",
        "branch": branch,
        "open_modules": open_modules,
        "secure_boot": secure_boot,
        "initramfs_command": (
            ["dracut", "--force", "--regenerate-all"] if family == "RedHat" else ["update-initramfs", "-u", "-k", "all"]
        ),
    }
    if source == "ubuntu":
        return _ubuntu_plan(platform, common, nvswitches)
    if source == "debian":
        return _debian_plan(platform, common, nvswitches, debian_mirror, debian_security_mirror)
    return _cuda_plan(platform, common, nvswitches, cuda_repo_base)


def _source(platform: Platform, source: str) -> str:
    """The package source, ``auto`` resolved (Ubuntu's own archive on Ubuntu, NVIDIA's CUDA repository elsewhere);
    refused when it does not serve the host's distribution."""
    if source == "auto":
        source = "ubuntu" if platform.family == "Ubuntu" else "cuda"
    if source not in SOURCES:
        raise DriverPlanError(f"nvidia_driver_source {source!r}: use one of auto, {', '.join(SOURCES)}")
    if platform.family not in SOURCES[source]:
        where = ", ".join(SOURCES[source])
        raise DriverPlanError(
            f"nvidia_driver_source {source!r} is for {where}; this host runs {platform.distribution} "
            f"{platform.major_version}: use 'cuda'" + (" or 'ubuntu'" if platform.family == "Ubuntu" else "")
        )
    return source


def _headers(platform: Platform) -> list[str]:
    """The kernel headers a DKMS build needs for the running kernel."""
    if platform.family == "RedHat":
        return [f"kernel-devel-{platform.kernel}", f"kernel-headers-{platform.kernel}"]
    return [f"linux-headers-{platform.kernel}"]


def _ubuntu_plan(platform: Platform, common: dict[str, Any], nvswitches: int) -> DriverPlan:
    """Canonical's packages: with Secure Boot its signed, precompiled modules (no DKMS build, nothing to sign)."""
    branch, secure_boot = common["branch"], common["secure_boot"]
    flavour = "-open" if common["open_modules"] else ""
    if secure_boot:
        packages = [
            f"linux-modules-nvidia-{branch}-server{flavour}-{platform.kernel}",
            f"nvidia-utils-{branch}-server",
            f"nvidia-compute-utils-{branch}-server",
            f"libnvidia-compute-{branch}-server",
        ]
    else:
        packages = [f"nvidia-driver-{branch}-server{flavour}", *_headers(platform)]
    return DriverPlan(
        **common,
        repository={},
        packages=packages,
        version_package=packages[0] if not secure_boot else f"nvidia-utils-{branch}-server",
        fabric_manager=f"nvidia-fabricmanager-{branch}" if nvswitches else "",
        hold_patterns=["*nvidia*", "libnvidia-*"],
        dkms=not secure_boot,
    )


def _debian_plan(
    platform: Platform, common: dict[str, Any], nvswitches: int, mirror: str, security_mirror: str
) -> DriverPlan:
    """Debian's non-free packages: the one branch the release carries, DKMS-built, no Fabric Manager."""
    branch, open_modules = common["branch"], common["open_modules"]
    have = DEBIAN_BRANCHES.get(platform.codename)
    if have is None:
        raise DriverPlanError(f"Debian {platform.codename} is not known to gpufleet's driver sources: use 'cuda'")
    if have != branch:
        raise DriverPlanError(
            f"Debian {platform.codename} ships driver branch {have}, not {branch}: set nvidia_driver_branch: "
            f"'{have}', or nvidia_driver_source: cuda for branch {branch}"
        )
    if nvswitches:
        raise DriverPlanError(
            "this host has NVSwitches but Debian's packages carry no Fabric Manager: use nvidia_driver_source: cuda"
        )
    dkms_package = "nvidia-open-kernel-dkms" if open_modules else "nvidia-kernel-dkms"
    components = ["contrib", "non-free", "non-free-firmware"]
    return DriverPlan(
        **common,
        repository={
            "name": "gpufleet-debian-nvidia",
            "stanzas": [
                {
                    "uris": mirror,
                    "suites": [platform.codename, f"{platform.codename}-updates"],
                    "components": components,
                },
                {"uris": security_mirror, "suites": [f"{platform.codename}-security"], "components": components},
            ],
            "signed_by": "/usr/share/keyrings/debian-archive-keyring.gpg",
        },
        packages=[
            dkms_package,
            "nvidia-driver",
            "firmware-nvidia-gsp",
            "nvidia-persistenced",
            "nvidia-smi",
            *_headers(platform),
        ],
        # Debian's security suite updates nvidia-graphics-drivers without the open modules' own source package:
        # the kernel module decides the version and everything else is pinned to it
        version_package=dkms_package,
        kernel_module="nvidia-current-open" if open_modules else "nvidia-current",
        pin_sources=["nvidia-graphics-drivers"] + (["nvidia-open-gpu-kernel-modules"] if open_modules else []),
        hold_patterns=["*nvidia*", "firmware-nvidia-gsp"],
    )


def _cuda_plan(platform: Platform, common: dict[str, Any], nvswitches: int, repo_base: str) -> DriverPlan:
    """NVIDIA's CUDA repository: a module stream (dnf) or a branch pinning package (apt)."""
    branch, open_modules, family = common["branch"], common["open_modules"], platform.family
    distro = CUDA_DISTROS[family].get(platform.major_version)
    if distro is None:
        known = ", ".join(f"{family} {v}" for v in CUDA_DISTROS[family])
        raise DriverPlanError(
            f"NVIDIA's CUDA repository has no {platform.distribution} {platform.major_version} "
            f"in gpufleet's list ({known})"
        )
    base = f"{repo_base.rstrip('/')}/{distro}/x86_64"
    main = "nvidia-open" if open_modules else "cuda-drivers"
    if family == "RedHat":
        return DriverPlan(
            **common,
            repository={"repo_file_url": f"{base}/cuda-{distro}.repo", "name": f"cuda-{distro}-x86_64"},
            module_stream=f"nvidia-driver:{branch}-open" if open_modules else f"nvidia-driver:{branch}-dkms",
            packages=[*_headers(platform), main],
            version_package=main,
            fabric_manager="nvidia-fabricmanager" if nvswitches else "",
            hold_patterns=[f"*nvidia*{branch}*"],
        )
    unversioned = int(branch) >= UNVERSIONED_NAMES_FROM
    return DriverPlan(
        **common,
        repository={"keyring_url": f"{base}/{CUDA_KEYRING}", "keyring_package": "cuda-keyring"},
        pinning_packages=[f"nvidia-driver-pinning-{branch}"],
        packages=[*_headers(platform), main],
        version_package=main,
        fabric_manager=("nvidia-fabricmanager" if unversioned else f"nvidia-fabricmanager-{branch}") * bool(nvswitches),
        hold_patterns=["*nvidia*", "libnvidia-*", "cuda-drivers*"],
    )


# -- is a host's driver the planned one --------------------------------------------------------------------------

# The kernel modules' licenses as modinfo prints them
MODULE_LICENSES = {"open": "Dual MIT/GPL", "proprietary": "NVIDIA"}
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (...)" (open modules) or
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu Sep 25 ..." (proprietary modules)
NVRM_VERSION = re.compile(
    r"NVRM version: NVIDIA UNIX (?:(?P<open>Open) Kernel Module for \S+|\S+ Kernel Module)\s+(?P<version>\d+(?:\.\d+)+)"
)


@dataclass(frozen=True)
class DriverState:
    """A host's driver as :func:`gpufleet.host.driverstate.read_driver_state` read it (each field is described
    there)."""

    kernel: str
    module: str
    module_version: str = ""
    module_license: str = ""
    module_error: str = ""
    proc_version: str = ""
    nouveau_loaded: bool = False
    nouveau_blacklisted: bool = False
    initramfs_blacklist: bool = False
    persistenced_enabled: str = ""
    persistenced_failed: bool = False
    persistenced_condition: bool = False
    held: bool = False
    imex_unit: str = ""  # read only where the plan masks it
    imex_enabled: str = ""
    imex_active: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DriverState:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _installed_problems(state: DriverState, branch: str, modules: str) -> list[str]:
    """The module installed for the running kernel (what the next boot loads)."""
    where = f"the {state.module} module for kernel {state.kernel}"
    if not state.module_version:
        return [f"{where} is not installed (modinfo: {state.module_error or 'no version'})"]
    problems = []
    if branch and state.module_version.split(".")[0] != branch:
        problems.append(f"{where} is {state.module_version}; the release pins branch {branch}")
    expected = MODULE_LICENSES[modules]
    if state.module_license != expected:
        kind = next((k for k, v in MODULE_LICENSES.items() if v == state.module_license), "unknown")
        problems.append(f"{where} is licensed {state.module_license!r} ({kind}); {modules} modules are {expected!r}")
    return problems


def _loaded_problems(state: DriverState, branch: str, modules: str, must_be_loaded: bool) -> list[str]:
    """The loaded driver: its NVRM line, and that it is the installed module (else a reboot is pending)."""
    text = state.proc_version.strip()
    if not text:
        return ["no NVIDIA driver is loaded (/proc/driver/nvidia/version is missing)"] if must_be_loaded else []
    m = NVRM_VERSION.search(text)
    if not m:
        return [f"/proc/driver/nvidia/version says {text!r}, not an NVRM version line"]
    problems = []
    version, loaded = m["version"], "open" if m["open"] else "proprietary"
    if branch and version.split(".")[0] != branch:
        problems.append(f"driver {version} is loaded; the release pins branch {branch}")
    if loaded != modules:
        problems.append(f"the loaded driver {version} uses the {loaded} kernel modules; expected {modules}")
    if state.module_version and version != state.module_version:
        problems.append(
            f"driver {version} is loaded but {state.module_version} is installed for kernel {state.kernel}: "
            "reboot (or reload the nvidia modules) to run it"
        )
    return problems


def _host_problems(state: DriverState, hold: bool) -> list[str]:
    """nouveau kept away, nvidia-persistenced as the role sets it up, the packages held."""
    checks = [
        (not state.nouveau_loaded, "nouveau is loaded: the NVIDIA driver cannot own the GPUs"),
        (state.nouveau_blacklisted, "modprobe's configuration does not blacklist nouveau"),
        (state.initramfs_blacklist, f"the initramfs of kernel {state.kernel} lacks the nouveau blacklist"),
        (
            state.persistenced_enabled == "enabled",
            f"nvidia-persistenced.service is {state.persistenced_enabled or 'missing'}, not enabled",
        ),
        (not state.persistenced_failed, "nvidia-persistenced.service failed"),
        (
            state.persistenced_condition,
            "nvidia-persistenced.service lacks ConditionPathExists=/dev/nvidiactl (it fails where no driver loads)",
        ),
        (state.held or not hold, "the driver's packages are not held: an upgrade could replace the driver"),
    ]
    return [message for ok, message in checks if not ok]


# systemctl is-active's answers for a unit that runs or is about to
IMEX_RUNNING = ("active", "activating", "reloading", "refreshing")


def _imex_problems(state: DriverState) -> list[str]:
    """The host's IMEX service where the DRA driver runs ComputeDomains: masked, and not running."""
    unit = state.imex_unit or "the IMEX service"
    why = "the DRA driver runs IMEX for this group's ComputeDomains (advertiser dra, NVLink across hosts)"
    problems = []
    if state.imex_enabled not in ("masked", "masked-runtime"):
        problems.append(f"{unit} is {state.imex_enabled or 'not read'}, not masked: {why}")
    if state.imex_active in IMEX_RUNNING:
        problems.append(f"{unit} is running ({state.imex_active}): {why}")
    return problems


def driver_problems(
    state: DriverState,
    *,
    branch: str,
    kernel_modules: str = "open",
    hold: bool = True,
    must_be_loaded: bool = True,
    mask_imex: bool = False,
) -> list[str]:
    """How a host's driver differs from its plan: the module installed for the running kernel is the release's
    ``branch`` with the ``kernel_modules`` asked for; the loaded driver (required when ``must_be_loaded``: the host
    has NVIDIA GPUs) is that one; nouveau is blacklisted (also in the initramfs) and not loaded; nvidia-persistenced
    is enabled, not failed, and starts only with the driver; the packages are held when ``hold``; with ``mask_imex``
    (the DRA driver runs ComputeDomains here) the host's IMEX service is masked and not running. Empty when it
    matches. The one judgement of a driver: the ``nvidia_driver`` role's verify tasks, ``verify.yml`` (which runs
    them) and ``gpufleet lab verify`` all call this."""
    if kernel_modules not in MODULE_LICENSES:
        return [f"nvidia_driver_kernel_modules is {kernel_modules!r}; expected one of {', '.join(MODULE_LICENSES)}"]
    branch = str(branch or "")
    return [
        *_installed_problems(state, branch, kernel_modules),
        *_loaded_problems(state, branch, kernel_modules, must_be_loaded),
        *_host_problems(state, hold),
        *(_imex_problems(state) if mask_imex else []),
    ]
