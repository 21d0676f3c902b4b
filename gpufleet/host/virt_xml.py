"""libvirt domain XML for a planned VM (:class:`gpufleet.host.virt.VmPlan`), built with ``xml.etree`` (no text
templates).

Each domain: a q35 KVM guest whose vCPUs are pinned one to one (``<cputune>`` ``vcpupin``) with its emulator threads
apart (``emulatorpin``), its memory bound strictly to its NUMA node (``<numatune>``) and backed by hugepages of the
planned size (``<memoryBacking>``), the guest CPU topology matching the host's (SMT pairs as threads), and each
device passed through with VFIO (``<hostdev mode='subsystem' type='pci' managed='yes'>``: libvirt binds it to
vfio-pci while the VM runs). Above 255 vCPUs the guest needs x2APIC with interrupt remapping, so the domain gets a
virtual IOMMU (``<iommu model='intel'>`` with ``intremap``, ``<ioapic driver='qemu'>``), as libvirt documents.

The disk and network are left to the operator (a boot disk differs per site); the domain defines as it is.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from gpufleet.host.hostfacts import format_cpulist
from gpufleet.host.virt import VmPlan

# x2APIC is needed beyond 255 vCPUs, and with it interrupt remapping (a virtual IOMMU with intremap).
MAX_VCPUS_WITHOUT_IOMMU = 255


def _pci_address(parent: ET.Element, pci: str) -> None:
    """``0000:1b:00.0`` as libvirt's ``<address domain= bus= slot= function=/>``."""
    domain, bus, rest = pci.split(":")
    slot, function = rest.split(".")
    ET.SubElement(
        parent,
        "address",
        domain=f"0x{int(domain, 16):04x}",
        bus=f"0x{int(bus, 16):02x}",
        slot=f"0x{int(slot, 16):02x}",
        function=f"0x{int(function, 16):x}",
    )


def domain_element(vm: VmPlan) -> ET.Element:
    """The ``<domain>`` of one VM."""
    vcpus = len(vm.cpus)
    dom = ET.Element("domain", type="kvm")
    ET.SubElement(dom, "name").text = vm.name
    ET.SubElement(
        dom, "description"
    ).text = f"gpufleet virt plan: {vcpus} vCPUs pinned on NUMA node {vm.numa_node}, devices {', '.join(vm.hostdevs)}"
    ET.SubElement(dom, "memory", unit="KiB").text = str(vm.memory_mib * 1024)
    backing = ET.SubElement(dom, "memoryBacking")
    pages = ET.SubElement(backing, "hugepages")
    ET.SubElement(pages, "page", size=str(vm.hugepages.size_kib), unit="KiB")
    ET.SubElement(dom, "vcpu", placement="static").text = str(vcpus)
    tune = ET.SubElement(dom, "cputune")
    for i, cpu in enumerate(vm.cpus):
        ET.SubElement(tune, "vcpupin", vcpu=str(i), cpuset=str(cpu))
    ET.SubElement(tune, "emulatorpin", cpuset=format_cpulist(vm.emulator_cpus))
    numatune = ET.SubElement(dom, "numatune")
    ET.SubElement(numatune, "memory", mode="strict", nodeset=str(vm.numa_node))
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type", arch="x86_64", machine="q35").text = "hvm"
    features = ET.SubElement(dom, "features")
    ET.SubElement(features, "acpi")
    ET.SubElement(features, "apic")
    big = vcpus > MAX_VCPUS_WITHOUT_IOMMU
    if big:
        ET.SubElement(features, "ioapic", driver="qemu")
    cpu = ET.SubElement(dom, "cpu", mode="host-passthrough", check="none", migratable="off")
    threads = vm.threads_per_core
    ET.SubElement(cpu, "topology", sockets="1", dies="1", cores=str(vcpus // threads), threads=str(threads))
    ET.SubElement(dom, "on_poweroff").text = "destroy"
    ET.SubElement(dom, "on_reboot").text = "restart"
    ET.SubElement(dom, "on_crash").text = "destroy"
    devices = ET.SubElement(dom, "devices")
    for pci in vm.hostdevs:
        hostdev = ET.SubElement(devices, "hostdev", mode="subsystem", type="pci", managed="yes")
        _pci_address(ET.SubElement(hostdev, "source"), pci)
    if big:
        iommu = ET.SubElement(devices, "iommu", model="intel")
        ET.SubElement(iommu, "driver", intremap="on", eim="on")
    ET.SubElement(devices, "memballoon", model="none")  # ballooning cannot return pinned, passed-through memory
    return dom


def domain_xml(vm: VmPlan) -> str:
    """The domain XML document of one VM (``virsh define`` takes it)."""
    dom = domain_element(vm)
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode") + "\n"
