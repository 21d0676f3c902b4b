"""Metal3 ``BareMetalHost`` objects for a stack whose ``baremetal.engine`` is ``metal3``: pure, no Pulumi.

With that engine gpufleet does not drive BMCs itself. It writes, per host, one ``BareMetalHost``
(``metal3.io/v1alpha1``) and the ``Secret`` holding its BMC credentials on the stack's management cluster; the
Bare Metal Operator and Ironic then register, inspect, provision and power the host, with their own retries.
:mod:`infra.baremetal.metal3` creates these objects through pulumi-kubernetes and reads the hosts' states back.

How a stack host maps to the object (sources: the BareMetalHost CRD of baremetal-operator v0.13.2, vendored in
``tests/fixtures/crds/metal3/``; the Metal3 user guide, book.metal3.io, "Supported hardware", "Live ISO",
"Adopting Externally Provisioned Hosts"; baremetal-operator v0.13.2 ``pkg/hardwareutils/bmc/redfish*.go`` and
``internal/webhooks/metal3.io/v1alpha1/baremetalhost_validation.go``):

- ``spec.bmc.address``: every Redfish address names the server's system by its path,
  ``<driver>://<host>:<port>/redfish/v1/Systems/<id>``. The driver is ``redfish-virtualmedia`` for
  ``boot.source: virtual-media`` (Ironic boots its agent, or a live ISO, as a virtual CD) and ``redfish`` otherwise
  (network boot over iPXE, which needs a provisioning network with DHCP). HTTPS is the drivers' default carrier;
  a BMC reached over plain HTTP gets ``+http`` (``redfish+http://``, ``redfish-virtualmedia+http://``).
- ``spec.bootMACAddress``: the ``redfish`` driver needs it (its ``NeedsMAC`` is true and the operator's webhook
  refuses a host without it); virtual media does not. It cannot change once set.
- ``spec.image``: ``boot.image_url`` + ``boot.image_checksum`` (``sha256:<hex>``, or the URL of a checksum
  file). An ``.iso`` URL is booted as it is (``format: live-iso``, no checksum, never written to disk); any other
  image is written to the root device (``rootDeviceHints``) and needs a checksum.
- ``boot.source: disk`` means the host already has its operating system: ``externallyProvisioned: true``, so the
  operator only registers and powers it (no inspection, cleaning or deployment; deletion only powers it off).
- ``power`` -> ``online``; ``bmc.verify_tls: false`` -> ``disableCertificateVerification``;
  ``wipe_disks_on_delete`` -> ``automatedCleaningMode`` (``metadata``: the operator wipes the disks' metadata
  before provisioning and after deprovisioning; ``disabled``: it never does); ``boot.mode`` -> ``bootMode``.
- The credentials Secret (``<host>-bmc``, type Opaque) holds the keys ``username`` and ``password`` the CRD asks
  for. The password is never in a :class:`Metal3Host`: only the Pulumi config key it comes from is.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, urlsplit

from gpufleet.common.diagnostics import Path, format_path
from gpufleet.kube.labels import GPU_MODEL_LABEL, HOST_GROUP_LABEL

API_VERSION = "metal3.io/v1alpha1"
KIND = "BareMetalHost"
# The BareMetalHost's labels (HOST_GROUP_LABEL, GPU_MODEL_LABEL): what a CAPM3 hostSelector or `kubectl get bmh -l`
# selects hosts by.

ChecksumType = Literal["md5", "sha256", "sha512", "auto"]
ImageFormat = Literal["raw", "qcow2", "vdi", "vmdk", "live-iso"]
BootMode = Literal["UEFI", "UEFISecureBoot", "legacy"]
BootSource = Literal["disk", "pxe", "virtual-media"]

BOOT_MODES: tuple[str, ...] = ("UEFI", "UEFISecureBoot", "legacy")  # the CRD's spec.bootMode enum
BOOT_SOURCES: tuple[str, ...] = ("disk", "pxe", "virtual-media")
_HEX_DIGITS = {"md5": 32, "sha256": 64, "sha512": 128}  # hex digits of each checksum type the CRD accepts
_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")  # the CRD's bootMACAddress pattern, whole string
# Kubernetes object names (DNS-1123 subdomain) and label values
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
# A BMH name the operator refuses: a UUID (baremetalhost_validation.go, validateBMHName)
_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
NAMESPACE_PATH: Path = ("baremetal", "metal3", "namespace")
_SERVICE_ROOT_PATHS = ("", "/", "/redfish/v1", "/redfish/v1/")

# status.provisioning.state values (baremetal-operator v0.13.2, apis/metal3.io/v1alpha1/baremetalhost_types.go)
STATE_PROVISIONED = "provisioned"
STATE_EXTERNALLY_PROVISIONED = "externally provisioned"
STATE_AVAILABLE = "available"


@dataclass(frozen=True)
class Problem:
    """Why a stack host cannot become a BareMetalHost; ``path`` is relative to the host (``("boot", "source")``)."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{format_path(self.path)}: {self.message}"


class Metal3Error(ValueError):
    """Stack hosts that cannot become BareMetalHosts: one ``baremetal.hosts[i].field: message`` line each."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class RootDeviceHints:
    """Which disk the image is written to (the CRD's ``spec.rootDeviceHints``); unset fields are not hints."""

    device_name: str | None = None  # /dev/... or /dev/disk/by-path/...
    hctl: str | None = None
    model: str | None = None
    vendor: str | None = None
    serial_number: str | None = None
    min_size_gigabytes: int | None = None
    wwn: str | None = None
    rotational: bool | None = None

    def to_spec(self) -> dict[str, Any]:
        keys = {
            "device_name": "deviceName",
            "hctl": "hctl",
            "model": "model",
            "vendor": "vendor",
            "serial_number": "serialNumber",
            "min_size_gigabytes": "minSizeGigabytes",
            "wwn": "wwn",
            "rotational": "rotational",
        }
        return {key: getattr(self, attr) for attr, key in keys.items() if getattr(self, attr) is not None}


@dataclass(frozen=True)
class Image:
    """The CRD's ``spec.image``: what the operator deploys (or, for ``live-iso``, boots)."""

    url: str
    checksum: str | None = None  # a hex digest or the URL of a checksum file; not for live-iso
    checksum_type: ChecksumType | None = None
    format: ImageFormat | None = None  # None: Ironic detects it

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"url": self.url}
        if self.checksum is not None:
            spec["checksum"] = self.checksum
        if self.checksum_type is not None:
            spec["checksumType"] = self.checksum_type
        if self.format is not None:
            spec["format"] = self.format
        return spec


@dataclass(frozen=True)
class Metal3Host:
    """One BareMetalHost and its credentials Secret, as gpufleet writes them (no password: ``password_key``
    names the Pulumi secret config key it comes from)."""

    name: str
    namespace: str
    bmc_host: str  # host[:port] of the Redfish service, as in a URL ("10.0.0.11", "[fd00::11]:8443")
    system_id: str  # the ComputerSystem id: /redfish/v1/Systems/<system_id>
    username: str
    password_key: str  # e.g. "gpufleet:bmc_password"
    virtual_media: bool = False  # redfish-virtualmedia:// rather than redfish://
    bmc_https: bool = True
    disable_certificate_verification: bool = False
    boot_mac: str | None = None
    online: bool = True
    boot_mode: BootMode = "UEFI"
    image: Image | None = None
    externally_provisioned: bool = False
    root_device_hints: RootDeviceHints | None = None
    automated_cleaning: bool = True
    labels: Mapping[str, str] = field(default_factory=dict)
    host_group: str | None = None
    serial: str | None = None  # the SerialNumber the stack expects; Metal3 reports the one it finds on inspection

    @property
    def credentials_name(self) -> str:
        """The Secret holding the BMC user name and password."""
        return f"{self.name}-bmc"

    @property
    def bmc_address(self) -> str:
        """``spec.bmc.address``: the driver (and ``+http`` when the BMC has no TLS), the host, the system's path."""
        driver = "redfish-virtualmedia" if self.virtual_media else "redfish"
        if not self.bmc_https:
            driver += "+http"
        return f"{driver}://{self.bmc_host}/redfish/v1/Systems/{quote(self.system_id, safe='')}"

    @property
    def target_state(self) -> str:
        """The ``status.provisioning.state`` the host settles in once the operator has done what its spec asks."""
        if self.externally_provisioned:
            return STATE_EXTERNALLY_PROVISIONED
        if self.image is not None and self.online:  # provisioning needs online: true (baremetal-operator docs/api.md)
            return STATE_PROVISIONED
        return STATE_AVAILABLE


def bare_metal_host(host: Metal3Host) -> dict[str, Any]:
    """The ``BareMetalHost`` object for ``host`` (the password is not in it: the Secret is named)."""
    bmc: dict[str, Any] = {"address": host.bmc_address, "credentialsName": host.credentials_name}
    if host.disable_certificate_verification:
        bmc["disableCertificateVerification"] = True
    spec: dict[str, Any] = {
        "bmc": bmc,
        "online": host.online,
        "bootMode": host.boot_mode,
        "automatedCleaningMode": "metadata" if host.automated_cleaning else "disabled",
    }
    if host.boot_mac is not None:
        spec["bootMACAddress"] = host.boot_mac
    if host.image is not None:
        spec["image"] = host.image.to_spec()
    if host.externally_provisioned:
        spec["externallyProvisioned"] = True
    if host.root_device_hints is not None and host.root_device_hints.to_spec():
        spec["rootDeviceHints"] = host.root_device_hints.to_spec()
    said = [f"host group {host.host_group}" if host.host_group else "", f"serial {host.serial}" if host.serial else ""]
    if any(said):
        spec["description"] = ", ".join(part for part in said if part)  # for people reading `kubectl get bmh -o yaml`
    metadata: dict[str, Any] = {"name": host.name, "namespace": host.namespace}
    if host.labels:
        metadata["labels"] = dict(host.labels)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def secret_data(username: str, password: str) -> dict[str, str]:
    """The credentials Secret's ``data``: ``username`` and ``password``, base64 as Secret data is."""
    return {
        "username": base64.b64encode(username.encode()).decode(),
        "password": base64.b64encode(password.encode()).decode(),
    }


def credentials_secret(host: Metal3Host, password: str) -> dict[str, Any]:
    """The ``Secret`` the BareMetalHost's ``credentialsName`` points at; ``password`` is the caller's, never kept."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": host.credentials_name, "namespace": host.namespace, "labels": dict(host.labels)},
        "type": "Opaque",
        "data": secret_data(host.username, password),
    }


# -- read back --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostStatus:
    """What the operator reports about a host (``status`` of its BareMetalHost); None where it has not yet."""

    provisioning_state: str | None = None
    powered_on: bool | None = None
    operational_status: str | None = None  # OK, discovered, error, delayed, detached, servicing
    error_message: str | None = None
    serial_number: str | None = None  # status.hardware.systemVendor.serialNumber, after inspection

    def to_outputs(self) -> dict[str, Any]:
        return {
            "provisioning_state": self.provisioning_state,
            "powered_on": self.powered_on,
            "operational_status": self.operational_status,
            "error_message": self.error_message,
            "serial_number": self.serial_number,
        }


def host_status(status: Mapping[str, Any] | None) -> HostStatus:
    """The :class:`HostStatus` of a BareMetalHost's ``status`` (None or empty before the operator has seen it)."""
    if not status:
        return HostStatus()
    provisioning = status.get("provisioning") or {}
    vendor = (status.get("hardware") or {}).get("systemVendor") or {}
    return HostStatus(
        provisioning_state=provisioning.get("state") or None,
        powered_on=status.get("poweredOn"),
        operational_status=status.get("operationalStatus") or None,
        error_message=status.get("errorMessage") or None,
        serial_number=vendor.get("serialNumber") or None,
    )


# -- from the stack ---------------------------------------------------------------------------------------------


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """An attribute of a stack object (a spec model) or a key of a mapping (the same data, unparsed)."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _parse_checksum(value: str) -> tuple[str, ChecksumType] | str:
    """``sha256:<hex>`` -> (hex, type); a URL of a checksum file -> (url, auto); else the reason it is not one."""
    if value.startswith(("http://", "https://")):
        return value, "auto"
    algorithm, sep, digest = value.partition(":")
    algorithm = algorithm.lower()
    if not sep or algorithm not in _HEX_DIGITS:
        return f"{value!r} is not <md5|sha256|sha512>:<hex digest> nor the URL of a checksum file"
    if len(digest) != _HEX_DIGITS[algorithm] or not re.fullmatch(r"[0-9a-fA-F]+", digest):
        return f"a {algorithm} checksum is {_HEX_DIGITS[algorithm]} hex digits, not {digest!r}"
    return digest.lower(), algorithm  # type: ignore[return-value]


def _image(boot: Any, source: str) -> Image | list[Problem]:
    url = _get(boot, "image_url")
    checksum = _get(boot, "image_checksum")
    if not url:
        if source == "virtual-media":
            return [Problem(("boot", "image_url"), "virtual-media boot needs the URL of an image")]
        return []
    parts = urlsplit(str(url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return [Problem(("boot", "image_url"), f"{url!r} is not an http(s) URL the host can download")]
    if parts.path.lower().endswith(".iso"):  # booted as it is, never written to disk (Metal3 "Live ISO")
        return Image(url=str(url), format="live-iso")
    if not checksum:
        return [Problem(("boot", "image_checksum"), "an image written to disk needs a checksum (sha256:<hex>)")]
    parsed = _parse_checksum(str(checksum))
    if isinstance(parsed, str):
        return [Problem(("boot", "image_checksum"), parsed)]
    digest, kind = parsed
    return Image(url=str(url), checksum=digest, checksum_type=kind)


def _bmc(bmc: Any) -> tuple[str, bool] | list[Problem]:
    """``bmc.address`` -> (host[:port], https?)."""
    address = _get(bmc, "address")
    if not address:
        return [Problem(("bmc", "address"), "the BMC's address is required")]
    parts = urlsplit(str(address))
    try:
        port = parts.port
    except ValueError:
        return [Problem(("bmc", "address"), f"{address!r} has no valid port")]
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return [Problem(("bmc", "address"), f"{address!r} is not http(s)://host[:port] of a Redfish service")]
    if "@" in parts.netloc:
        return [Problem(("bmc", "address"), "credentials do not belong in the BMC address")]
    if parts.path not in _SERVICE_ROOT_PATHS or parts.query or parts.fragment:
        why = f"{address!r}: give the service's host and port only (system_id names the system)"
        return [Problem(("bmc", "address"), why)]
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return (f"{host}:{port}" if port is not None else host), parts.scheme == "https"


def _password_key(bmc: Any) -> str | Problem:
    password = _get(bmc, "password")
    key = _get(password, "secret") if password is not None and not isinstance(password, str) else None
    if not key:
        return Problem(("bmc", "password"), "give the password as a secret reference ({secret: gpufleet:KEY})")
    return str(key)


def _online(power: Any) -> bool | Problem:
    if power is None or power is True or power == "on":
        return True
    if power is False or power == "off":
        return False
    return Problem(("power",), f"{power!r} is not on or off")


def _labels(host: Any) -> dict[str, str] | list[Problem]:
    labels: dict[str, str] = {}
    problems = []
    group = _get(host, "host_group")
    if group:
        labels[HOST_GROUP_LABEL] = str(group)
    gpu_model = _get(_get(host, "expected"), "gpu_model")
    if gpu_model:
        labels[GPU_MODEL_LABEL] = str(gpu_model)
    for key, value in labels.items():
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            where = ("host_group",) if key == HOST_GROUP_LABEL else ("expected", "gpu_model")
            problems.append(Problem(where, f"{value!r} is not a Kubernetes label value"))
    return problems or labels


def _root_device_hints(hints: Any) -> RootDeviceHints | None:
    if hints is None or isinstance(hints, RootDeviceHints):
        return hints
    return RootDeviceHints(**{name: _get(hints, name) for name in RootDeviceHints.__dataclass_fields__})


def host_problems(host: Any, namespace: str) -> list[Problem]:
    """Why ``host`` (a stack host) cannot become a BareMetalHost; empty when it can. For ``gpufleet validate``."""
    result = metal3_host(host, namespace)
    return result if isinstance(result, list) else []


def metal3_host(host: Any, namespace: str) -> Metal3Host | list[Problem]:
    """One stack host (an object or mapping with the stack's attribute names) -> its :class:`Metal3Host`, or the
    problems that stop it."""
    problems: list[Problem] = []
    name = str(_get(host, "name") or "")
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name) or _UUID.fullmatch(name):
        problems.append(
            Problem(("name",), f"{name!r} is not a Kubernetes object name (lowercase letters, digits, '-', '.')")
        )
    system_id = _get(host, "system_id")
    if not system_id:
        problems.append(
            Problem(("system_id",), "Metal3 addresses a Redfish system by its id (/redfish/v1/Systems/<id>): give it")
        )
    bmc = _get(host, "bmc")
    endpoint = _bmc(bmc)
    if isinstance(endpoint, list):
        problems.extend(endpoint)
    password_key = _password_key(bmc)
    if isinstance(password_key, Problem):
        problems.append(password_key)
    username = _get(bmc, "username")
    if not username:
        problems.append(Problem(("bmc", "username"), "the BMC user name is required"))

    boot = _get(host, "boot")
    source = str(_get(boot, "source") or "disk")
    if source not in BOOT_SOURCES:
        problems.append(Problem(("boot", "source"), f"{source!r} is not one of {', '.join(BOOT_SOURCES)}"))
    mode = str(_get(boot, "mode") or "UEFI")
    if mode not in BOOT_MODES:
        problems.append(Problem(("boot", "mode"), f"{mode!r} is not one of {', '.join(BOOT_MODES)}"))
    image = _image(boot, source)
    if isinstance(image, list):
        problems.extend(image)
        image = None
    virtual_media = source == "virtual-media"

    boot_mac = _get(host, "boot_mac")
    if boot_mac is not None and not _MAC.fullmatch(str(boot_mac)):
        problems.append(Problem(("boot_mac",), f"{boot_mac!r} is not a MAC address (aa:bb:cc:dd:ee:ff)"))
    if not boot_mac and not virtual_media:
        # the redfish:// driver's NeedsMAC is true: the operator's webhook refuses the host without it
        why = f"the provisioning NIC's MAC is required with boot.source {source} (Metal3's redfish:// driver)"
        problems.append(Problem(("boot_mac",), why))
    online = _online(_get(host, "power"))
    if isinstance(online, Problem):
        problems.append(online)
    labels = _labels(host)
    if isinstance(labels, list):
        problems.extend(labels)
    if problems:
        return problems

    assert not isinstance(endpoint, list) and isinstance(password_key, str) and isinstance(online, bool)
    assert isinstance(labels, dict)
    bmc_host, https = endpoint
    serial = _get(host, "serial")
    group = _get(host, "host_group")
    return Metal3Host(
        name=name,
        namespace=namespace,
        bmc_host=bmc_host,
        system_id=str(system_id),
        username=str(username),
        password_key=password_key,
        virtual_media=virtual_media,
        bmc_https=https,
        disable_certificate_verification=https and _get(bmc, "verify_tls", True) is False,
        boot_mac=str(boot_mac).lower() if boot_mac else None,
        online=online,
        boot_mode=mode,  # type: ignore[arg-type]  # checked against BOOT_MODES above
        image=image,
        externally_provisioned=source == "disk",
        root_device_hints=_root_device_hints(_get(host, "root_device_hints")),
        automated_cleaning=bool(_get(host, "wipe_disks_on_delete", False)),
        labels=labels,
        host_group=str(group) if group else None,
        serial=str(serial) if serial else None,
    )


def hosts_from_stack(hosts: Iterable[Any], namespace: str) -> tuple[Metal3Host, ...]:
    """The stack's ``baremetal.hosts`` -> one :class:`Metal3Host` each in ``namespace`` (``baremetal.metal3
    .namespace``). Raises :class:`Metal3Error` with every problem, as ``baremetal.hosts[i].field: message``."""
    out: list[Metal3Host] = []
    problems: list[Problem] = []
    if len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace):
        problems.append(Problem(NAMESPACE_PATH, f"{namespace!r} is not a Kubernetes namespace name"))
    for i, host in enumerate(hosts):
        result = metal3_host(host, namespace)
        if isinstance(result, list):
            problems.extend(Problem(("baremetal", "hosts", i, *p.path), p.message) for p in result)
        else:
            out.append(result)
    if problems:
        raise Metal3Error(problems)
    return tuple(out)
