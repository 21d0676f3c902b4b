"""TEST DOUBLES of the commands and files gpufleet.host.driverstate reads on a host with an NVIDIA driver: ``modinfo``,
``modprobe``, ``lsinitramfs``, ``systemctl``, ``apt-mark`` (shell scripts in a ``bin`` directory put first on
PATH) and ``proc/driver/nvidia/version`` (below a host root).

Each answers only the calls driverstate makes, as the real tool does: kmod's ``modinfo -k KERNEL -F FIELD MODULE``
prints the field, or ``modinfo: ERROR: Module MODULE not found.`` on stderr with exit 1; ``modprobe --showconfig``
prints the merged configuration; ``lsinitramfs IMAGE`` lists the image's paths; ``systemctl is-enabled`` prints the
unit's state (exit 0 only when enabled; nvidia-imex.service's own, empty when it is not installed),
``is-active`` prints nvidia-imex.service's active state (exit 0 only when active), ``is-failed`` prints
nvidia-persistenced's active state (exit 0 only when failed), ``cat``
prints its unit files with a ``# path`` line before each; ``apt-mark showhold`` prints one held package per line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


def nvrm_line(version: str, open_modules: bool = True) -> str:
    """``/proc/driver/nvidia/version``'s first line, as the open or the proprietary modules print it."""
    if open_modules:
        return f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build  (dvs-builder@U22)\n"
    return f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Thu Sep 25 12:00:00 UTC 2025\n"


@dataclass
class DriverHost:
    """A host whose driver matches the plan of branch 580, open modules, from the CUDA repository (module
    ``nvidia``, version package ``nvidia-open``) unless told otherwise. ``loaded``: the NVRM line ("" when no driver
    is loaded)."""

    module: str = "nvidia"
    version: str = "580.95.05"
    license: str = "Dual MIT/GPL"
    loaded: str | None = None  # None: the installed module, loaded
    nouveau_loaded: bool = False
    nouveau_blacklisted: bool = True
    initramfs_blacklist: bool = True
    persistenced: str = "enabled"
    persistenced_failed: bool = False
    persistenced_condition: bool = True
    held: tuple[str, ...] = ("nvidia-open",)
    imex_enabled: str = ""  # systemctl is-enabled nvidia-imex.service ("": not installed)
    imex_active: str = "inactive"

    def install(self, bin_dir: Path, root: Path) -> None:
        """Write the stand-ins into ``bin_dir`` and the host's files below ``root``."""
        bin_dir.mkdir(parents=True, exist_ok=True)
        loaded = nvrm_line(self.version, self.license == "Dual MIT/GPL") if self.loaded is None else self.loaded
        if loaded:
            (root / "proc/driver/nvidia").mkdir(parents=True, exist_ok=True)
            (root / "proc/driver/nvidia/version").write_text(loaded + "GCC version:  gcc version 12.2.0\n")
        if self.nouveau_loaded:
            (root / "sys/module/nouveau").mkdir(parents=True, exist_ok=True)
        blacklist = "blacklist nouveau\noptions nouveau modeset=0\n" if self.nouveau_blacklisted else ""
        initramfs = "etc/modprobe.d/gpufleet-blacklist-nouveau.conf\n" if self.initramfs_blacklist else ""
        condition = "ConditionPathExists=/dev/nvidiactl\n" if self.persistenced_condition else ""
        scripts = {
            "modinfo": (
                f'for last; do :; done; field=$4\nif [ "$last" = "{self.module}" ]; then\n'
                f'  case "$field" in version) echo "{self.version}";; license) echo "{self.license}";; esac; exit 0\n'
                'fi\necho "modinfo: ERROR: Module $last not found." >&2; exit 1\n'
            ),
            "modprobe": f"printf '%s' 'blacklist snd_pcsp\n{blacklist}alias pci:v000010DEd* nvidia\n'\n",
            "lsinitramfs": f"printf '%s' '.\nusr/lib/modules\n{initramfs}etc/modprobe.d/amd64-microcode.conf\n'\n",
            "systemctl": (
                'case "$1" in\n'
                '  is-enabled) if [ "$2" = nvidia-imex.service ]; then\n'
                f'    echo "{self.imex_enabled}"; [ "{self.imex_enabled}" = enabled ]; exit; fi\n'
                f'    echo "{self.persistenced}"; [ "{self.persistenced}" = enabled ];;\n'
                f'  is-active) echo "{self.imex_active}"; [ "{self.imex_active}" = active ];;\n'
                f'  is-failed) if [ "{self.persistenced_failed}" = True ]; then echo failed; exit 0; fi;'
                " echo inactive; exit 1;;\n"
                "  cat) printf '%s' '# /usr/lib/systemd/system/nvidia-persistenced.service\n[Service]\n"
                "ExecStart=/usr/bin/nvidia-persistenced\n\n"
                f"# /etc/systemd/system/nvidia-persistenced.service.d/gpufleet.conf\n[Unit]\n{condition}';;\n"
                "esac\n"
            ),
            "apt-mark": "".join(f"echo {p}\n" for p in self.held) or ":\n",
        }
        for name, body in scripts.items():
            (bin_dir / name).write_text("#!/bin/sh\n" + body)
            (bin_dir / name).chmod(0o755)
