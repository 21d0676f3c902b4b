"""TEST DOUBLES of AMD's apt repositories and of Debian's own ROCm packages, for the lab's AMD test (never for a real
host): packages of the real names at the version strings AMD's repositories carry for a release, each installing a
marker file (and amd-smi-lib the amd-smi test double, tests/lab/standins/fake_amd.py), built here with ``dpkg-deb``.

- :func:`amd_repositories`: AMD's two repositories as the amd_driver role reads them, signed with a key made for the
  test (served over HTTP by :class:`Served`, as AMD's are over HTTPS, so that apt's origin is their host):
  ``amdgpu/<release>/ubuntu`` with ``amdgpu-dkms`` and ``rocm/apt/<release>`` with the ROCm packages, suite
  ``jammy``, component ``main``, the key as ``rocm.gpg.key`` (ASCII-armored, as AMD's).
- :func:`debian_repository`: a flat local repository standing in for Debian's archive: Debian 12's ``rocminfo`` and
  ``rocm-smi`` at 5.2.3-2, whose versions sort above AMD's (Debian bug #1028307), and the running kernel's headers.

AMD's version strings (the release field is what matters; the build numbers are illustrative): amdgpu-dkms
``1:6.14.14.30100100-2212064.22.04`` for Instinct driver 30.10.1 (an 8-digit release field, AMD's Instinct driver
version scheme), ROCm packages ``<own version>.70001-<build>~22.04`` for ROCm 7.0.1.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from email.utils import formatdate
from functools import partial
from pathlib import Path

from tests.lab.standins import FAKE_AMD

SUITE = "jammy"
MARKERS = "usr/share/gpufleet-test-double"  # each stand-in package installs <MARKERS>/<its name>
ROCM = "opt/rocm-7.0.1"
LINKS = (("opt/rocm", "rocm-7.0.1"),)  # /opt/rocm -> the release (rocm-core manages it on a real host)
ROCMINFO = "#!/bin/sh\necho 'rocminfo TEST DOUBLE: no GPU agent'\n"


@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    arch: str = "amd64"
    files: tuple[tuple[str, str, int], ...] = ()  # (path, content, mode) besides the marker
    links: tuple[tuple[str, str], ...] = ()  # (path, target)

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version.split(':', 1)[-1]}_{self.arch}.deb"


def amd_debs(amdgpu: str = "30.10.1", rocm: str = "7.0.1") -> dict[str, list[Deb]]:
    """The stand-in packages of AMD's two repositories for the releases (only 30.10.1 / 7.0.1 are modelled)."""
    assert (amdgpu, rocm) == ("30.10.1", "7.0.1"), "the stand-ins model amdgpu 30.10.1 and ROCm 7.0.1"
    smi = FAKE_AMD.read_text()
    return {
        "amdgpu": [Deb("amdgpu-dkms", "1:6.14.14.30100100-2212064.22.04", "all")],
        "rocm": [
            Deb("amd-smi-lib", "26.0.1.70001-42~22.04", files=((f"{ROCM}/bin/amd-smi", smi, 0o755),), links=LINKS),
            Deb("rocminfo", "1.0.0.70001-42~22.04", files=((f"{ROCM}/bin/rocminfo", ROCMINFO, 0o755),)),
            Deb("rocm-smi-lib", "7.8.0.70001-42~22.04"),
        ],
    }


def debian_debs(kernel: str) -> list[Deb]:
    """Debian 12's own ROCm tools (the versions bookworm ships) and the headers of ``kernel``."""
    return [Deb("rocminfo", "5.2.3-2"), Deb("rocm-smi", "5.2.3-2"), Deb(f"linux-headers-{kernel}", "1")]


def build_deb(deb: Deb, out: Path, who: str) -> Path:
    """``deb`` built with dpkg-deb into ``out``; its description names it a test double of ``who``'s package."""
    tree = out / f".{deb.name}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(
        f"Package: {deb.name}\nVersion: {deb.version}\nArchitecture: {deb.arch}\nMaintainer: gpufleet lab"
        f" <lab@invalid>\nDescription: TEST DOUBLE of {who}'s {deb.name} (gpufleet lab)\n installs a marker file"
        " only; never for a real host\n"
    )
    marker = tree / MARKERS / deb.name
    marker.parent.mkdir(parents=True)
    marker.write_text(f"{deb.name} {deb.version}\n")
    for path, content, mode in deb.files:
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(content)
        (tree / path).chmod(mode)
    for path, target in deb.links:
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).symlink_to(target)
    target = out / deb.filename
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(target)],
        check=True, stdin=subprocess.DEVNULL, capture_output=True, timeout=60,
    )  # fmt: skip
    shutil.rmtree(tree)
    return target


def _packages(debs: list[Deb], files: list[Path], base: Path) -> str:
    """The Packages index of the built ``files``."""
    stanzas = []
    for deb, path in zip(debs, files, strict=True):
        data = path.read_bytes()
        stanzas.append(
            f"Package: {deb.name}\nVersion: {deb.version}\nArchitecture: {deb.arch}\nMaintainer: gpufleet lab"
            f" <lab@invalid>\nFilename: {path.relative_to(base)}\nSize: {len(data)}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\nDescription: TEST DOUBLE of {deb.name}\n"
        )
    return "\n".join(stanzas)


def _gpg(home: Path, *args: str) -> bytes:
    proc = subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", "", *args],
        capture_output=True, check=False, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"gpg {' '.join(args)} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def signing_key(home: Path) -> str:
    """A signing key made for the test (GNUPGHOME ``home``); returns its public key, ASCII-armored."""
    home.mkdir(mode=0o700, parents=True)
    _gpg(home, "--quick-generate-key", "gpufleet lab TEST DOUBLE of AMD's key <lab@invalid>", "ed25519", "sign")
    return _gpg(home, "--armor", "--export").decode()


def _repository(base: Path, debs: list[Deb], who: str, key_home: Path) -> None:
    """A signed repository at ``base``: pool/, dists/<suite>/main/binary-amd64/Packages and an InRelease."""
    pool = base / "pool/main"
    pool.mkdir(parents=True)
    files = [build_deb(deb, pool, who) for deb in debs]
    index = base / f"dists/{SUITE}/main/binary-amd64/Packages"
    index.parent.mkdir(parents=True)
    index.write_text(_packages(debs, files, base))
    data = index.read_bytes()
    release = (
        f"Origin: gpufleet lab TEST DOUBLE of {who}\nLabel: {who}\nSuite: {SUITE}\nCodename: {SUITE}\n"
        f"Date: {formatdate(usegmt=True)}\nArchitectures: amd64\nComponents: main\n"
        f"SHA256:\n {hashlib.sha256(data).hexdigest()} {len(data)} main/binary-amd64/Packages\n"
    )
    (base / f"dists/{SUITE}/Release").write_text(release)
    dists = base / f"dists/{SUITE}"
    _gpg(key_home, "--clearsign", "--output", str(dists / "InRelease"), str(dists / "Release"))


def amd_repositories(root: Path, key_home: Path) -> dict[str, str]:
    """AMD's stand-in repositories under ``root`` (served at its top): paths relative to ``root`` of the two
    repositories and the key, as the amd_driver role's variables take them after the server's URL."""
    (root / "rocm").mkdir(parents=True)
    (root / "rocm/rocm.gpg.key").write_text(signing_key(key_home))
    debs = amd_debs()
    _repository(root / "amdgpu/30.10.1/ubuntu", debs["amdgpu"], "AMD", key_home)
    _repository(root / "rocm/apt/7.0.1", debs["rocm"], "AMD", key_home)
    return {"amdgpu": "amdgpu/30.10.1/ubuntu", "rocm": "rocm/apt/7.0.1", "key": "rocm/rocm.gpg.key"}


def debian_repository(base: Path, kernel: str) -> None:
    """A flat repository (``deb [trusted=yes] file:<base> ./``) standing in for Debian's archive."""
    base.mkdir(parents=True)
    debs = debian_debs(kernel)
    files = [build_deb(deb, base, "Debian") for deb in debs]
    (base / "Packages").write_text(_packages(debs, files, base))


class Served:
    """``directory`` served over HTTP on 127.0.0.1 (a free port) from a thread, until :meth:`close`. The lab's
    containers share this machine's network, so they reach it at the same address."""

    def __init__(self, directory: Path) -> None:
        handler = partial(_QuietHandler, directory=str(directory))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        if os.environ.get("GPUFLEET_LAB_HTTP_LOG"):
            super().log_message(format, *args)
